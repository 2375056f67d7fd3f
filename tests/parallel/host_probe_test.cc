// ctest-labels: multiproc
// The host terms of the layout search measured on real ranks (forked processes on loopback,
// worlds of 3 and 4): every rank gets world rank 0's figures, exactly; the inflation is a
// positive ratio and rank 0 ran the work alone before every rank ran it together (its count
// of calls); the synchronisation delay has one entry per divisor of the world above 1, none
// negative; a world of 1 measures nothing; bad options are named.
#include "heft/parallel/layout/host_probe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "heft/error.h"
#include "heft/parallel/layout/comm_measure.h"
#include "support/ranks.h"

namespace heft::parallel::layout {
namespace {

// A little CPU work (a few microseconds).
void spin(volatile double* sink) {
  double x = 1;
  for (int i = 0; i < 20000; ++i) x = x * 1.0000001 + 1e-9;
  *sink = x;
}

void same_terms_on_every_rank(int n) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("host_probe_test." + std::to_string(::getpid()) + "." + std::to_string(n));
  std::filesystem::create_directories(dir);
  test::StoreProcess store;
  HostProbeOptions o;
  o.warmup = 1, o.rounds = 4;
  const test::RunResult r = test::run_world(n, store, [&](comm::Communicator& world) {
    volatile double sink = 0;
    int calls = 0;
    const double inflation = measure_inflation(world, [&] { spin(&sink), ++calls; }, o);
    const int inflation_calls = calls;
    const std::vector<SyncDelay> sync = measure_sync_delay(world, [&] { spin(&sink); }, default_comm_table(), o);
    std::ostringstream os;
    os.precision(17);
    os << inflation;
    for (const SyncDelay& d : sync) os << " " << d.group << " " << d.seconds;
    std::ofstream(dir / std::to_string(world.rank())) << os.str() << "\n" << inflation_calls << "\n";
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
  std::string first;
  for (int rank = 0; rank < n; ++rank) {
    std::ifstream in(dir / std::to_string(rank));
    std::string terms;
    int calls = 0;
    std::getline(in, terms);
    in >> calls;
    if (rank == 0) first = terms;
    EXPECT_EQ(terms, first) << "rank " << rank << " of " << n;
    // Rank 0: warm-up and rounds alone, then with the others; they: with rank 0 only.
    EXPECT_EQ(calls, (rank == 0 ? 2 : 1) * (o.warmup + o.rounds)) << "rank " << rank;
  }
  std::filesystem::remove_all(dir);
  std::istringstream fields(first);
  double inflation = 0;
  fields >> inflation;
  EXPECT_TRUE(std::isfinite(inflation) && inflation > 0) << first;
  int entries = 0, group = 0;
  double seconds = 0;
  std::vector<int> groups;
  while (fields >> group >> seconds) {
    ++entries;
    groups.push_back(group);
    EXPECT_GE(seconds, 0) << "g " << group;
    EXPECT_TRUE(std::isfinite(seconds)) << "g " << group;
  }
  std::vector<int> divisors;
  for (int g = 2; g <= n; ++g)
    if (n % g == 0) divisors.push_back(g);
  EXPECT_EQ(groups, divisors) << first;
}

TEST(HostProbe, SameTermsOnEveryRankOf3) { same_terms_on_every_rank(3); }
TEST(HostProbe, SameTermsOnEveryRankOf4) { same_terms_on_every_rank(4); }

TEST(HostProbe, AWorldOfOneMeasuresNothing) {
  test::StoreProcess store;
  const test::RunResult r = test::run_world(1, store, [](comm::Communicator& world) {
    int calls = 0;
    test::expect(measure_inflation(world, [&] { ++calls; }) == 1, "expected inflation 1");
    test::expect(measure_sync_delay(world, [&] { ++calls; }, default_comm_table()).empty(), "expected no delays");
    test::expect(calls == 0, "expected no work run");
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
}

TEST(HostProbe, BadOptionsNameTheOption) {
  test::StoreProcess store;
  const test::RunResult r = test::run_world(2, store, [](comm::Communicator& world) {
    HostProbeOptions o;
    o.groups = {3};
    try {
      measure_sync_delay(world, [] {}, default_comm_table(), o);
      test::expect(false, "expected InvalidArgument");
    } catch (const InvalidArgument& e) {
      test::expect(std::string(e.what()).find("host_probe.groups") != std::string::npos, e.what());
    }
    o.groups.clear();
    o.rounds = 0;
    try {
      measure_inflation(world, [] {}, o);
      test::expect(false, "expected InvalidArgument");
    } catch (const InvalidArgument& e) {
      test::expect(std::string(e.what()).find("host_probe.rounds") != std::string::npos, e.what());
    }
  });
  ASSERT_TRUE(r.all_ok()) << r.summary();
}

TEST(HostProbe, DescribeNamesEachTerm) {
  const std::string s = describe_host_terms(1.08, 1.5, {{2, 2.1e-4}, {4, 3.5e-4}});
  EXPECT_EQ(s, "compute x1.08, step x1.50, synchronisation 0.210 ms (g 2), 0.350 ms (g 4)");
  EXPECT_EQ(describe_host_terms(1, 1, {}), "compute x1.00, step x1.00, synchronisation not measured");
}

}  // namespace
}  // namespace heft::parallel::layout
