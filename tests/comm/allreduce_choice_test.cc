// ctest-labels: multiproc
// Same result twice: every shared-memory allreduce form sums each element in local-rank
// order (which form runs never changes a bit), and across hosts the measured
// choice between the hierarchical form and the flat ring is recorded by rank 0 and taken
// again by the next communicator on the same topology, before its first call, so two runs
// sum in the same order; so is, on one host, a small allreduce's shared-memory step (small or
// direct) where the options measure it, and where ranks share cores, the core-grouped or the
// flat form. Real forked ranks.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

namespace fs = std::filesystem;
using test::expect;

// Rank r's data: magnitudes from 1e-3 to 1e3, so that the grouping of a sum shows in its bits.
std::vector<float> data_of(int r, size_t count) {
  std::mt19937 gen(1234 + r);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-3, 3);
  std::vector<float> x(count);
  for (float& v : x) v = mantissa(gen) * std::pow(10.0f, static_cast<float>(exponent(gen)));
  return x;
}

// ((x0 + x1) + x2) + ..., element i.
float left_fold(const std::vector<std::vector<float>>& xs, size_t i) {
  float s = xs[0][i] + xs[1][i];
  for (size_t r = 2; r < xs.size(); ++r) s += xs[r][i];
  return s;
}

bool cross_memory_attach_works() {
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  static volatile uint64_t word = 0x68656674;
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    uint64_t got = 0;
    iovec local{&got, sizeof(got)};
    iovec remote{const_cast<uint64_t*>(&word), sizeof(got)};
    _exit(process_vm_readv(parent, &local, 1, &remote, 1, 0) == sizeof(got) ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// On one host of 3 and 4 ranks, the direct, slots and single-copy forms give every element as
// the left fold in rank order, bit for bit (the single copy form once summed its own data
// first), and auto takes the direct form above the small size, small below, on every call.
TEST(AllreduceChoice, ShmFormsSumInRankOrder) {
  using Form = CommunicatorOptions::ShmForm;
  const bool cma = cross_memory_attach_works();
  const size_t count = 300007;  // several pieces and chunks, uneven slices
  for (int n : {3, 4}) {
    std::vector<std::vector<float>> xs;
    for (int r = 0; r < n; ++r) xs.push_back(data_of(r, count));
    // The data are order-sensitive: a rotated grouping differs somewhere.
    size_t sensitive = 0;
    for (size_t i = 0; i < count; ++i)
      sensitive += ((xs[n - 1][i] + xs[0][i]) + xs[1][i]) != ((xs[0][i] + xs[1][i]) + xs[n - 1][i]);
    ASSERT_GT(sensitive, count / 100) << "test data do not tell sum orders apart";
    for (Form form : {Form::kAuto, Form::kSlots, Form::kSingleCopy}) {
      if (form == Form::kSingleCopy && !cma) continue;
      test::StoreProcess store;
      CommunicatorOptions o;
      o.shm_form = form;
      o.shm_chunk_bytes = 64 << 10;
      auto res = test::run_world(n, store, [&](Communicator& c) {
        std::vector<float> x = data_of(c.rank(), count);
        c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        const std::string want = form == Form::kSingleCopy ? "shm/single_copy"
                                 : form == Form::kSlots    ? "shm/slots"
                                                           : "shm/direct";
        expect(c.last_allreduce_path() == want,
               "path " + c.last_allreduce_path() + ", want " + want);
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          const float sum = left_fold(xs, i);
          wrong += std::memcmp(&x[i], &sum, sizeof(float)) != 0;
        }
        expect(wrong == 0, want + " on " + std::to_string(n) + " ranks: " +
                               std::to_string(wrong) + " elements not the rank-order sum");
      }, o);
      EXPECT_TRUE(res.all_ok()) << "n=" << n << " form=" << static_cast<int>(form) << " "
                                << res.summary();
    }
  }
  if (!cma) GTEST_SKIP() << "no cross-memory attach here: single copy was not checked";
}

// The cache file's decisions: "fingerprint\tbucket\tform" lines.
std::vector<std::pair<int, std::string>> recorded(const std::string& path) {
  std::vector<std::pair<int, std::string>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const auto a = line.find('\t'), b = line.rfind('\t');
    if (a == std::string::npos || a == b) continue;
    out.emplace_back(std::atoi(line.substr(a + 1, b - a - 1).c_str()), line.substr(b + 1));
  }
  return out;
}

const size_t kCounts[] = {(256 << 10) + 7, (64 << 10) + 3};  // ~1 MiB, ~256 KiB of floats

// One lifetime of a 2 x 2 world: rank 0's cache is `cache`, the others have none (as ranks
// with other homes), so every decision they take comes from rank 0. Each rank checks what
// `check` says about its communicator after three calls of each size.
using Check = std::function<void(Communicator&, const std::vector<std::string>& paths)>;
void lifetime(const std::string& cache, const Check& check) {
  test::StoreProcess store;
  static int worlds = 0;
  const std::string group = "choice/world" + std::to_string(worlds++);
  const std::vector<std::string> hosts = test::split_hosts(4, 2);
  auto res = test::run_ranks(4, [&](int rank) {
    setenv("HEFT_ALLREDUCE_CACHE", rank == 0 ? cache.c_str() : "off", 1);
    CommunicatorOptions o;
    o.token = store.token();
    o.host = hosts[rank];
    o.timeout = std::chrono::seconds(60);
    auto c = Communicator::create(store.connect(), group, rank, 4, o);
    std::vector<std::string> paths;
    for (size_t count : kCounts)
      for (int call = 0; call < 3; ++call) {
        std::vector<float> x(count, static_cast<float>(rank + 1));
        c->allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[count - 1] == 10.0f, "wrong sum");
        paths.push_back(c->last_allreduce_path());
      }
    check(*c, paths);
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// Every call of a size took `form` (from the first call on).
void expect_form(const std::vector<std::string>& paths, size_t first, const std::string& form) {
  for (size_t k = first; k < first + 3; ++k)
    expect(paths[k].rfind(form, 0) == 0, "call " + std::to_string(k) + " took " + paths[k] +
                                             ", the recorded form is " + form);
}

TEST(AllreduceChoice, RecordedAcrossLifetimes) {
  const fs::path dir = fs::temp_directory_path() / ("heft-choice-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string cache = (dir / "comm" / "allreduce-forms").string();
  // First lifetime: measures both sizes before their first call, rank 0 records them.
  lifetime(cache, [](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 2 && c.recorded_allreduce_choices() == 0,
           "first lifetime: measurements " + std::to_string(c.allreduce_measurements()));
    for (size_t s = 0; s < 2; ++s)
      expect_form(paths, 3 * s, name(c.measured_allreduce(kCounts[s] * sizeof(float))));
  });
  auto first = recorded(cache);
  ASSERT_EQ(first.size(), 2u) << "rank 0 did not record both sizes in " << cache;
  std::map<int, std::string> want(first.begin(), first.end());
  // Second lifetime: no measurement, every rank takes rank 0's record from the first call.
  lifetime(cache, [&](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 0 && c.recorded_allreduce_choices() == 2,
           "second lifetime measured again (" + std::to_string(c.allreduce_measurements()) +
               "), recorded " + std::to_string(c.recorded_allreduce_choices()));
    for (size_t s = 0; s < 2; ++s) {
      const size_t bytes = kCounts[s] * sizeof(float);
      const int bucket = 63 - __builtin_clzll(bytes);
      expect(want.count(bucket) && name(c.measured_allreduce(bytes)) == want[bucket],
             "a different form than recorded at " + std::to_string(bytes) + " B");
      expect_form(paths, 3 * s, want[bucket]);
    }
  });
  EXPECT_EQ(recorded(cache).size(), 2u) << "a known decision was recorded again";
  // The record decides, not a measurement: swap each form in the file, and every rank
  // (only rank 0 reads the file) takes the swapped one.
  {
    std::ifstream in(cache);
    std::stringstream all;
    all << in.rdbuf();
    std::string text = all.str(), swapped;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const auto tab = line.rfind('\t');
      const std::string form = line.substr(tab + 1);
      swapped += line.substr(0, tab + 1) + (form == "ring" ? "hierarchical" : "ring") + "\n";
    }
    std::ofstream(cache, std::ios::trunc) << swapped;
  }
  lifetime(cache, [&](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 0, "measured despite a record");
    for (size_t s = 0; s < 2; ++s) {
      const int bucket = 63 - __builtin_clzll(kCounts[s] * sizeof(float));
      expect_form(paths, 3 * s, want[bucket] == "ring" ? "hierarchical" : "ring");
    }
  });
  fs::remove_all(dir);
}

// HEFT_ALLREDUCE_CACHE=off: each lifetime measures (the old behaviour), nothing is written.
TEST(AllreduceChoice, OffMeasuresEachTime) {
  lifetime("off", [](Communicator& c, const std::vector<std::string>&) {
    expect(c.allreduce_measurements() == 2 && c.recorded_allreduce_choices() == 0,
           "cache off: measurements " + std::to_string(c.allreduce_measurements()));
  });
}

// One kind of decision measured on one host or over TCP and recorded (a fresh record, a
// lifetime that reads it, a hand-edited record): `lifetime` runs a world whose rank 0 reads and
// writes `cache`, three calls of each of four sizes, and checks what its Check says; the second
// and third sizes are measured (size buckets `buckets`), the first and last follow the rule
// (`outside`). `forms` are the record's names of the two forms, `path_of` a form's path.
struct RecordLife {
  std::function<void(const std::string& cache, const Check&)> lifetime;
  std::string prefix;  // how the record's fingerprint starts
  int buckets[2];
  std::string forms[2];
  std::function<std::string(const std::string& form)> path_of;
  std::function<void(const std::vector<std::string>& paths)> outside;
};

// Measured once and recorded, taken from the record by the next lifetime (no measurement), a
// record edited by hand decides (the first measured size the second form, the other the first).
void check_record_life(const RecordLife& life, const std::string& dir_name) {
  const fs::path dir = fs::temp_directory_path() / (dir_name + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  const std::string cache = (dir / "comm" / "allreduce-forms").string();
  const std::string either[] = {life.path_of(life.forms[0]), life.path_of(life.forms[1])};
  life.lifetime(cache, [&](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 2 && c.recorded_allreduce_choices() == 0,
           "first lifetime: measurements " + std::to_string(c.allreduce_measurements()));
    life.outside(paths);
    for (size_t first : {3, 6})
      expect(paths[first] == paths[first + 1] && paths[first] == paths[first + 2] &&
                 (paths[first] == either[0] || paths[first] == either[1]),
             "a measured size's calls took " + paths[first] + ", " + paths[first + 1] + ", " + paths[first + 2]);
  });
  const auto first = recorded(cache);
  ASSERT_EQ(first.size(), 2u) << "rank 0 did not record both measured sizes in " << cache;
  std::map<int, std::string> want(first.begin(), first.end());
  ASSERT_EQ(want.count(life.buckets[0]) + want.count(life.buckets[1]), 2u)
      << "buckets recorded: " << first[0].first << ", " << first[1].first;
  std::string fingerprint;
  {
    std::ifstream in(cache);
    std::getline(in, fingerprint, '\t');
  }
  EXPECT_EQ(fingerprint.rfind(life.prefix, 0), 0u) << fingerprint;
  life.lifetime(cache, [&](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 0 && c.recorded_allreduce_choices() == 2,
           "second lifetime measured again (" + std::to_string(c.allreduce_measurements()) + "), recorded " +
               std::to_string(c.recorded_allreduce_choices()));
    life.outside(paths);
    expect_form(paths, 3, life.path_of(want[life.buckets[0]]));
    expect_form(paths, 6, life.path_of(want[life.buckets[1]]));
  });
  std::ofstream(cache, std::ios::trunc) << fingerprint << '\t' << life.buckets[0] << '\t' << life.forms[1] << '\n'
                                        << fingerprint << '\t' << life.buckets[1] << '\t' << life.forms[0] << '\n';
  life.lifetime(cache, [&](Communicator& c, const std::vector<std::string>& paths) {
    expect(c.allreduce_measurements() == 0, "measured despite a record");
    life.outside(paths);
    expect_form(paths, 3, either[1]);
    expect_form(paths, 6, either[0]);
  });
  fs::remove_all(dir);
}

// The shared-memory step of a small allreduce on one host (measure_shm_small: HEFT_SHM_SMALL_BYTES
// auto): 2 ranks, sizes inside the measured range (4 KiB, 32 KiB) and outside it (256 B: small,
// 256 KiB: direct, by the rule). The first lifetime measures each inside size once before its
// first call and rank 0 records it; the second takes the record (no measurement); a record
// edited by hand decides; the measurement's own runs are not counted as calls.
const size_t kShmCounts[] = {64, 1 << 10, 8 << 10, 64 << 10};  // floats: 256 B, 4, 32, 256 KiB

void shm_lifetime(const std::string& cache, const Check& check) {
  test::StoreProcess store;
  static int worlds = 0;
  const std::string group = "shm-step/world" + std::to_string(worlds++);
  auto res = test::run_ranks(2, [&](int rank) {
    setenv("HEFT_ALLREDUCE_CACHE", rank == 0 ? cache.c_str() : "off", 1);
    CommunicatorOptions o;
    o.token = store.token();
    o.host = "h0";
    o.timeout = std::chrono::seconds(60);
    o.measure_shm_small = true;
    auto c = Communicator::create(store.connect(), group, rank, 2, o);
    std::vector<std::string> paths;
    for (size_t count : kShmCounts)
      for (int call = 0; call < 3; ++call) {
        std::vector<float> x(count, static_cast<float>(rank + 1));
        c->allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[0] == 3.0f && x[count - 1] == 3.0f, "wrong sum at " + std::to_string(count) + " floats");
        paths.push_back(c->last_allreduce_path());
      }
    const shm::PathCounts k = c->shm_path_counts();
    expect(k.small + k.direct == 12, "calls counted: small " + std::to_string(k.small) + " direct " +
                                         std::to_string(k.direct) + ", want 12 in all");
    check(*c, paths);
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST(AllreduceChoice, SmallShmStepMeasuredOnceRecordedAndTakenFromTheRecord) {
  check_record_life({shm_lifetime, "shm-step v2 world=2 ", {12, 15}, {"small", "direct"},
                     [](const std::string& form) { return "shm/" + form; },
                     [](const std::vector<std::string>& paths) {
                       expect_form(paths, 0, "shm/small");   // 256 B: below the measured range
                       expect_form(paths, 9, "shm/direct");  // 256 KiB: above it
                     }},
                    "heft-shm-step");
}

// Ranks that share cores (measure_shm_cores: HEFT_SHM_CORES_MIN_BYTES auto): 4 ranks in core
// groups of 2, their first ranks forced far, sizes inside the measured range (64 KiB, 512 KiB)
// and outside it (32 KiB: flat, 4 MiB: core-grouped, by the rule). The first lifetime measures
// each inside size once and rank 0 records it; the second takes the record; a record edited by
// hand decides; the measurement's runs are not counted as calls.
const size_t kCoresCounts[] = {8 << 10, 16 << 10, 128 << 10, 1 << 20};  // floats: 32, 64, 512 KiB, 4 MiB

void cores_lifetime(const std::string& cache, const Check& check) {
  test::StoreProcess store;
  static int worlds = 0;
  const std::string group = "shm-cores/world" + std::to_string(worlds++);
  auto res = test::run_ranks(4, [&](int rank) {
    setenv("HEFT_ALLREDUCE_CACHE", rank == 0 ? cache.c_str() : "off", 1);
    CommunicatorOptions o;
    o.token = store.token();
    o.host = "h0";
    o.timeout = std::chrono::seconds(60);
    o.shm_core_group = 2;
    o.shm_placement = CommunicatorOptions::ShmPlacement::kFar;
    o.measure_shm_cores = true;
    auto c = Communicator::create(store.connect(), group, rank, 4, o);
    std::vector<std::string> paths;
    for (size_t count : kCoresCounts)
      for (int call = 0; call < 3; ++call) {
        std::vector<float> x(count, static_cast<float>(rank + 1));
        c->allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[0] == 10.0f && x[count - 1] == 10.0f, "wrong sum at " + std::to_string(count) + " floats");
        paths.push_back(c->last_allreduce_path());
      }
    const shm::PathCounts k = c->shm_path_counts();
    expect(k.cores + k.direct == 12 && k.small + k.slots + k.single_copy == 0,
           "calls counted: cores " + std::to_string(k.cores) + " direct " + std::to_string(k.direct) +
               ", want 12 in all");
    check(*c, paths);
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST(AllreduceChoice, CoreGroupedCrossoverMeasuredOnceRecordedAndTakenFromTheRecord) {
  check_record_life({cores_lifetime, "shm-cores v1 world=4 ", {16, 19}, {"flat", "cores"},
                     [](const std::string& form) { return form == "cores" ? "shm/cores" : "shm/direct"; },
                     [](const std::vector<std::string>& paths) {
                       expect_form(paths, 0, "shm/direct");  // 32 KiB: below the measured range
                       expect_form(paths, 9, "shm/cores");   // 4 MiB: above it
                     }},
                    "heft-shm-cores");
}

// Over TCP alone (measure_small_messages: HEFT_SMALL_MESSAGE_BYTES auto): 2 ranks on hosts that
// share no memory, sizes inside the measured range (16 KiB, 256 KiB) and outside it (1 KiB:
// recursive doubling, 4 MiB: the ring, by the rule). Measured once and recorded, taken from the
// record by the next lifetime, a hand-edited record decides.
const size_t kTcpCounts[] = {256, 4 << 10, 64 << 10, 1 << 20};  // floats: 1, 16, 256 KiB, 4 MiB

void tcp_lifetime(const std::string& cache, const Check& check) {
  test::StoreProcess store;
  static int worlds = 0;
  const std::string group = "tcp-small/world" + std::to_string(worlds++);
  auto res = test::run_ranks(2, [&](int rank) {
    setenv("HEFT_ALLREDUCE_CACHE", rank == 0 ? cache.c_str() : "off", 1);
    CommunicatorOptions o;
    o.token = store.token();
    o.host = "h" + std::to_string(rank);
    o.timeout = std::chrono::seconds(60);
    o.measure_small_messages = true;
    auto c = Communicator::create(store.connect(), group, rank, 2, o);
    std::vector<std::string> paths;
    for (size_t count : kTcpCounts)
      for (int call = 0; call < 3; ++call) {
        std::vector<float> x(count, static_cast<float>(rank + 1));
        c->allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        expect(x[0] == 3.0f && x[count - 1] == 3.0f, "wrong sum at " + std::to_string(count) + " floats");
        paths.push_back(c->last_allreduce_path());
      }
    check(*c, paths);
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

TEST(AllreduceChoice, TcpCrossoverMeasuredOnceRecordedAndTakenFromTheRecord) {
  check_record_life({tcp_lifetime, "v2 world=2 hosts=1,1 ", {14, 18}, {"recursive_doubling", "ring"},
                     [](const std::string& form) { return form; },
                     [](const std::vector<std::string>& paths) {
                       expect_form(paths, 0, "recursive_doubling");  // 1 KiB: below the measured range
                       expect_form(paths, 9, "ring");                // 4 MiB: above it
                     }},
                    "heft-tcp-small");
}

}  // namespace
}  // namespace heft::comm
