// ctest-labels: multiproc
// The layout search's measured collective costs: the fit recovers alpha and beta from
// synthetic timings (exact on a line, clamped where the line would need a negative latency or
// a negative slope), and on real ranks (forked processes on loopback, worlds of 2, 3 and 4)
// every rank gets the same table, with an entry for each collective on each group size the
// world's layouts need and positive costs.
#include "heft/parallel/layout/comm_measure.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "heft/error.h"
#include "support/ranks.h"

namespace heft::parallel::layout {
namespace {

std::vector<CommSample> line(double alpha, double beta, const std::vector<int64_t>& sizes) {
  std::vector<CommSample> out;
  for (int64_t b : sizes) out.push_back({Collective::kAllReduce, 4, b, alpha + static_cast<double>(b) / beta});
  return out;
}

TEST(CommFit, RecoversAlphaAndBetaOfALine) {
  const CollectiveCost c = fit(Collective::kAllReduce, 4, line(40e-6, 3e9, {16 << 10, 256 << 10, 2 << 20}));
  EXPECT_NEAR(c.alpha_s, 40e-6, 1e-9);
  EXPECT_NEAR(c.beta_bytes_per_s / 3e9, 1.0, 1e-6);
  EXPECT_EQ(c.group, 4);
}

TEST(CommFit, NoisyTimingsStayWithinTheNoise) {
  std::vector<CommSample> s = line(100e-6, 1e9, {16 << 10, 256 << 10, 2 << 20});
  s[0].seconds *= 1.05, s[1].seconds *= 0.95, s[2].seconds *= 1.02;
  const CollectiveCost c = fit(Collective::kAllReduce, 4, s);
  EXPECT_NEAR(c.beta_bytes_per_s / 1e9, 1.0, 0.05);
  EXPECT_GT(c.alpha_s, 0);
  EXPECT_LT(c.alpha_s, 200e-6);
}

TEST(CommFit, NegativeInterceptIsClampedAndRefittedThroughTheOrigin) {
  std::vector<CommSample> s = {{Collective::kP2P, 2, 1000, 0.5e-6}, {Collective::kP2P, 2, 2000, 2e-6}};
  const CollectiveCost c = fit(Collective::kP2P, 2, s);
  EXPECT_EQ(c.alpha_s, 0);
  // Through the origin: slope = sum(xy)/sum(xx) = (0.5e-3 + 4e-3) / 5e6 = 0.9e-9 s/B.
  EXPECT_NEAR(c.beta_bytes_per_s, 1 / 0.9e-9, 1e3);
}

TEST(CommFit, FlatTimingsAreFreeBandwidth) {
  std::vector<CommSample> s = {{Collective::kAllGather, 2, 1000, 5e-5}, {Collective::kAllGather, 2, 9000, 4e-5}};
  const CollectiveCost c = fit(Collective::kAllGather, 2, s);
  EXPECT_TRUE(std::isinf(c.beta_bytes_per_s));
  EXPECT_NEAR(c.alpha_s, 4.5e-5, 1e-12);
}

TEST(CommFit, NoSamplesIsAnErrorNamingThem) {
  try {
    fit(Collective::kAllReduce, 2, {});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("samples"), std::string::npos) << e.what();
  }
}

TEST(CommFit, TableHasOneEntryPerCollectiveAndGroup) {
  std::vector<CommSample> s = line(1e-5, 1e9, {100, 1000});
  for (CommSample x : line(2e-5, 2e9, {100, 1000})) s.push_back({Collective::kP2P, 2, x.bytes, x.seconds});
  const CommTable t = fit_table(s);
  ASSERT_EQ(t.entries.size(), 2u);
  EXPECT_NEAR(t.seconds(Collective::kAllReduce, 4, 1000000), 1e-5 + 1e-3, 1e-9);
  EXPECT_NEAR(t.seconds(Collective::kP2P, 2, 2000000), 2e-5 + 1e-3, 1e-9);
}

// A table as text, every digit of every number, to compare across ranks.
std::string exact(const CommTable& t) {
  std::ostringstream os;
  os.precision(17);
  for (const CollectiveCost& e : t.entries)
    os << to_string(e.collective) << " " << e.group << " " << e.alpha_s << " " << e.beta_bytes_per_s << "\n";
  return os.str();
}

void measured_table_is_the_same_on_every_rank(int n) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("comm_measure_test." + std::to_string(::getpid()) + "." + std::to_string(n));
  std::filesystem::create_directories(dir);
  test::StoreProcess store;
  MeasureOptions o;
  o.bytes = {4 << 10, 64 << 10, 512 << 10};
  o.repeats = 3;
  const test::RunResult r = test::run_world(n, store, [&](comm::Communicator& world) {
    const CommTable t = measure_comm_table(world, o);
    std::ofstream(dir / std::to_string(world.rank())) << exact(t);
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
  std::string first;
  for (int rank = 0; rank < n; ++rank) {
    std::ifstream in(dir / std::to_string(rank));
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (rank == 0) first = text;
    EXPECT_EQ(text, first) << "rank " << rank << " of " << n;
  }
  std::filesystem::remove_all(dir);
  // Every collective on every divisor of n above 1, p2p on pairs; each priced above zero.
  std::istringstream lines(first);
  std::string name, beta_text;
  int group = 0, entries = 0, p2p = 0;
  double alpha = 0;
  // beta is "inf" when a collective's times did not grow with its bytes (a loaded machine):
  // strtod reads it, operator>> would stop there.
  while (lines >> name >> group >> alpha >> beta_text) {
    const double beta = std::strtod(beta_text.c_str(), nullptr);
    ++entries;
    p2p += name == "p2p";
    EXPECT_TRUE(n % group == 0 || name == "p2p") << name << " g " << group;
    EXPECT_GE(alpha, 0) << name;
    EXPECT_GT(beta, 0) << name;
    EXPECT_GT(alpha + 1e6 / beta, 0) << name << ": a megabyte costs nothing";
  }
  int divisors = 0;
  for (int g = 2; g <= n; ++g) divisors += n % g == 0;
  EXPECT_EQ(entries, 3 * divisors + 1) << first;
  EXPECT_EQ(p2p, 1);
}

TEST(CommMeasure, SameTableOnEveryRankOf2) { measured_table_is_the_same_on_every_rank(2); }
TEST(CommMeasure, SameTableOnEveryRankOf3) { measured_table_is_the_same_on_every_rank(3); }
TEST(CommMeasure, SameTableOnEveryRankOf4) { measured_table_is_the_same_on_every_rank(4); }

TEST(CommMeasure, AWorldOfOneIsTheDefault) {
  test::StoreProcess store;
  const test::RunResult r = test::run_world(1, store, [](comm::Communicator& world) {
    test::expect(exact(measure_comm_table(world)) == exact(default_comm_table()), "expected the default table");
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
}

TEST(CommMeasure, BadOptionsNameTheOption) {
  test::StoreProcess store;
  const test::RunResult r = test::run_world(2, store, [](comm::Communicator& world) {
    MeasureOptions o;
    o.groups = {3};
    try {
      measure_comm_table(world, o);
      test::expect(false, "expected InvalidArgument");
    } catch (const InvalidArgument& e) {
      test::expect(std::string(e.what()).find("measure.groups") != std::string::npos, e.what());
    }
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
}

}  // namespace
}  // namespace heft::parallel::layout
