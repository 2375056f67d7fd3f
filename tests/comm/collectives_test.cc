// ctest-labels: multiproc
// Every collective x dtype x op x world size {1,2,3,4,7} x awkward counts (0, 1, primes) x
// transport layout (TCP only; one shared-memory host; two simulated hosts, e.g. 7 = 3 + 4,
// so hierarchical paths run), through real forked ranks, checked against closed forms.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <string>

#include "heft/comm/communicator.h"
#include "heft/error.h"
#include "support/ranks.h"
#include "support/values.h"

namespace heft::comm {
namespace {

using test::Buffer;
using test::expect;
using test::expect_values;

// Rank r's element i: exact in every dtype (small integers), signs alternate so min and max
// differ from sum.
double contribution(int r, size_t i) {
  const double sign = i % 2 == 0 ? 1 : -1;
  return sign * (r + 1) + static_cast<double>(i % 3);
}

bool is_integer(DataType t) { return t == DataType::i32 || t == DataType::i64; }

// The closed form of op over ranks 0..n-1 of contribution(r, i), rounded as dtype t rounds.
double expected(ReduceOp op, DataType t, int n, size_t i) {
  const double sign = i % 2 == 0 ? 1 : -1, k = static_cast<double>(i % 3);
  const double sum = sign * n * (n + 1) / 2 + n * k;
  switch (op) {
    case ReduceOp::sum: return sum;
    case ReduceOp::min: return sign > 0 ? 1 + k : -n + k;
    case ReduceOp::max: return sign > 0 ? n + k : -1 + k;
    case ReduceOp::avg: {
      if (is_integer(t)) return std::trunc(sum / n);
      Buffer b(t, 1);
      b.set(0, sum / n);
      return b.get(0);
    }
    case ReduceOp::product: case ReduceOp::band: case ReduceOp::bor: case ReduceOp::bxor:
      break;  // not swept here (kAllReduceOps): tests/comm/reduce_ops_test.cc
  }
  return 0;
}

std::string label(const char* what, DataType t, ReduceOp op, size_t count, int n) {
  return std::string(what) + " " + name(t) + " " + name(op) + " count=" +
         std::to_string(count) + " world=" + std::to_string(n);
}

const size_t kCounts[] = {0, 1, 2, 97, 20011};

void check_allreduce(Communicator& c, bool in_place) {
  const int n = c.size(), r = c.rank();
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps)
      for (size_t count : kCounts) {
        Buffer in(t, count), out(t, count);
        for (size_t i = 0; i < count; ++i) in.set(i, contribution(r, i));
        Buffer& result = in_place ? in : out;
        c.allreduce(in.data(), result.data(), count, t, op);
        expect_values(result, count, [&](size_t i) { return expected(op, t, n, i); },
                      label(in_place ? "allreduce in place" : "allreduce", t, op, count, n));
      }
}

void check_reduce_scatter(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (DataType t : kAllDataTypes)
    for (ReduceOp op : kAllReduceOps)
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{4001}}) {
        // Element j of block b is global index b*count + j; in place uses block r of `in`.
        Buffer in(t, count * n), out(t, count);
        for (size_t i = 0; i < count * n; ++i) in.set(i, contribution(r, i));
        const bool in_place = count % 2 == 1;
        void* dst = in_place ? in.at(r * count) : out.data();
        c.reduce_scatter(in.data(), dst, count, t, op);
        Buffer got(t, count);
        std::memcpy(got.data(), dst, count * element_size(t));
        expect_values(got, count, [&](size_t j) { return expected(op, t, n, r * count + j); },
                      label("reduce_scatter", t, op, count, n));
      }
}

void check_allgather(Communicator& c) {
  const int n = c.size(), r = c.rank();
  auto value = [](int rank, size_t j) { return (rank + 1) * static_cast<double>(j % 5 + 1); };
  for (DataType t : kAllDataTypes)
    for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{4001}}) {
      Buffer in(t, count), out(t, count * n);
      const bool in_place = count % 2 == 1;
      Buffer& src = in_place ? out : in;
      const size_t base = in_place ? r * count : 0;
      for (size_t j = 0; j < count; ++j) src.set(base + j, value(r, j));
      c.allgather(in_place ? out.at(r * count) : in.data(), out.data(), count, t);
      expect_values(out, count * n,
                    [&](size_t i) { return value(static_cast<int>(i / count), i % count); },
                    label("allgather", t, ReduceOp::sum, count, n));
    }
}

void check_broadcast(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (int root : {0, n - 1, n / 2})
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i64})
      for (size_t count : {size_t{0}, size_t{1}, size_t{97}, size_t{100003}}) {
        Buffer b(t, count);
        for (size_t i = 0; i < count; ++i) b.set(i, r == root ? static_cast<double>(i % 251) : -1);
        c.broadcast(b.data(), count, t, root);
        expect_values(b, count, [](size_t i) { return static_cast<double>(i % 251); },
                      label("broadcast", t, ReduceOp::sum, count, n) + " root=" +
                          std::to_string(root));
      }
}

void check_reduce(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (int root : {0, n - 1})
    for (DataType t : kAllDataTypes)
      for (ReduceOp op : kAllReduceOps)
        for (size_t count : {size_t{0}, size_t{1}, size_t{97}}) {
          Buffer in(t, count), out(t, count);
          for (size_t i = 0; i < count; ++i) in.set(i, contribution(r, i));
          c.reduce(in.data(), out.data(), count, t, op, root);
          if (r == root)
            expect_values(out, count, [&](size_t i) { return expected(op, t, n, i); },
                          label("reduce", t, op, count, n));
        }
}

void check_alltoall(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}}) {
    Buffer in(DataType::i32, count * n), out(DataType::i32, count * n);
    // Block j of rank r's send holds 1000*r + 10*j + element.
    for (int j = 0; j < n; ++j)
      for (size_t e = 0; e < count; ++e) in.set(j * count + e, 1000.0 * r + 10.0 * j + e);
    c.alltoall(in.data(), out.data(), count, DataType::i32);
    expect_values(out, count * n,
                  [&](size_t i) { return 1000.0 * (i / count) + 10.0 * r + (i % count); },
                  "alltoall count=" + std::to_string(count));
  }
}

void check_send_recv(Communicator& c) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  // A ring of point-to-point messages; even ranks send first so the ring never deadlocks.
  Buffer out(DataType::f64, 1001), in(DataType::f64, 1001);
  for (size_t i = 0; i < 1001; ++i) out.set(i, r * 10000.0 + i);
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto s = c.send_async(out.data(), 1001, DataType::f64, right, 7);
  c.recv(in.data(), 1001, DataType::f64, left, 7);
  s->wait();
  expect_values(in, 1001, [&](size_t i) { return left * 10000.0 + i; }, "send/recv ring");
}

enum class Layout { kTcp, kShm, kTwoHosts };

class Collectives : public ::testing::TestWithParam<std::tuple<int, Layout>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  void run(const std::function<void(Communicator&)>& body, CommunicatorOptions options = {}) {
    test::StoreProcess store;
    options.timeout = std::chrono::seconds(60);
    // Each communicator measures afresh (allreduce_choice_test covers the record).
    setenv("HEFT_ALLREDUCE_CACHE", "off", 1);
    // Small chunks so that counts above make several pipeline chunks.
    options.shm_chunk_bytes = 4096;
    std::vector<std::string> hosts;
    switch (std::get<1>(GetParam())) {
      case Layout::kTcp: options.shared_memory = false; break;
      case Layout::kShm: break;
      case Layout::kTwoHosts: hosts = test::split_hosts(world(), std::min(2, world())); break;
    }
    test::RunResult res =
        test::run_world(world(), store, body, options, std::chrono::seconds(120), hosts);
    EXPECT_TRUE(res.all_ok()) << res.summary();
  }
};

TEST_P(Collectives, AllreduceAuto) {
  run([](Communicator& c) {
    check_allreduce(c, false);
    check_allreduce(c, true);
  });
}

TEST_P(Collectives, AllreduceRing) {
  CommunicatorOptions o;
  o.allreduce_algorithm = Algorithm::kRing;
  run([](Communicator& c) { check_allreduce(c, false); }, o);
}

TEST_P(Collectives, AllreduceRecursiveDoubling) {
  CommunicatorOptions o;
  o.allreduce_algorithm = Algorithm::kRecursiveDoubling;
  run([](Communicator& c) { check_allreduce(c, true); }, o);
}

// Whether this machine lets a process read a sibling's memory (cross-memory attach): a
// child reads a word of its parent, which allows it as shm::Context does.
bool cross_memory_attach_works() {
  static const bool works = [] {
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    static volatile uint64_t word = 0x68656674;
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child == 0) {
      uint64_t got = 0;
      iovec local{&got, sizeof(got)};
      iovec remote{const_cast<uint64_t*>(&word), sizeof(got)};
      const bool ok = process_vm_readv(parent, &local, 1, &remote, 1, 0) == sizeof(got) &&
                      got == 0x68656674;
      _exit(ok ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return works;
}

// Every form of the shared-memory allreduce, each checked for its results and for having
// really run (the single-copy form once passed every test without ever running).
TEST_P(Collectives, AllreduceShmFormsRunAndAgree) {
  using Form = CommunicatorOptions::ShmForm;
  const Layout layout = std::get<1>(GetParam());
  const bool one_shm_host = layout == Layout::kShm && world() > 1;
  const bool cma = cross_memory_attach_works();
  for (size_t small : {size_t{0}, size_t{1} << 30}) {
    for (Form form : {Form::kAuto, Form::kDirect, Form::kSlots, Form::kSingleCopy}) {
      CommunicatorOptions o;
      o.shm_small_bytes = small;
      o.shm_form = form;
      o.measure_allreduce = false;  // across hosts: hierarchical at every size (tested below)
      run([=](Communicator& c) {
        check_allreduce(c, false);
        const shm::PathCounts k = c.shm_path_counts();
        const std::string counts = "small=" + std::to_string(k.small) + " direct=" +
                                   std::to_string(k.direct) + " slots=" +
                                   std::to_string(k.slots) + " single_copy=" +
                                   std::to_string(k.single_copy) + " last=" +
                                   c.last_allreduce_path();
        if (!c.has_shared_memory()) {
          expect(k.small + k.direct + k.slots + k.single_copy == 0,
                 "no shared memory, yet " + counts);
          return;
        }
        if (!one_shm_host) {  // hierarchical: the direct form on every host, or host leaders
          const bool direct = c.topology().uniform();
          expect(k.single_copy + k.slots + k.small == 0 && (k.direct > 0) == direct,
                 "hierarchical must take the direct form on uniform hosts, else leaders: " +
                     counts);
          expect(c.last_allreduce_path() ==
                     (direct ? "hierarchical(shm/direct)" : "hierarchical(leaders)"),
                 "hierarchical path: " + counts);
          return;
        }
        if (small != 0) {
          expect(k.small > 0 && k.direct + k.slots + k.single_copy == 0,
                 "small form only: " + counts);
          return;
        }
        const bool single = form == Form::kSingleCopy && cma;
        const bool slots = form == Form::kSlots;
        expect((k.single_copy > 0) == single,
               "single copy runs exactly when forced and available: " + counts);
        expect((k.slots > 0) == slots, "the slots run exactly when forced: " + counts);
        expect((k.direct > 0) == (!single && !slots) && k.small == 0,
               "direct otherwise (auto, forced, or single copy unavailable): " + counts);
      }, o);
    }
  }
}

// Across hosts, auto measures the hierarchical form against the flat ring once per
// power-of-two size above small_message_bytes, before the first call of that size; every
// rank keeps the same choice and every call runs it; small messages and
// measure_allreduce=false stay hierarchical without measuring.
TEST_P(Collectives, AllreduceAcrossHostsChoosesByMeasurement) {
  if (std::get<1>(GetParam()) != Layout::kTwoHosts || world() < 3)
    GTEST_SKIP() << "needs several hosts, one with several ranks";
  for (bool measure : {true, false}) {
    CommunicatorOptions o;
    o.measure_allreduce = measure;
    run([=](Communicator& c) {
      const int n = c.size(), r = c.rank();
      std::vector<float> small(100, static_cast<float>(r));
      c.allreduce(small.data(), small.size(), DataType::f32, ReduceOp::sum);
      expect(c.allreduce_measurements() == 0, "a small allreduce was measured");
      expect(c.last_allreduce_path().rfind("hierarchical", 0) == 0,
             "small allreduce across hosts: " + c.last_allreduce_path());
      const size_t count = (256 << 10) + 7;  // floats: ~1 MiB, above small_message_bytes
      std::vector<std::string> paths;
      for (int call = 0; call < 4; ++call) {
        std::vector<float> x(count);
        for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(contribution(r, i));
        c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i)
          wrong += x[i] != static_cast<float>(expected(ReduceOp::sum, DataType::f32, n, i));
        expect(wrong == 0, std::to_string(wrong) + " wrong elements, call " +
                               std::to_string(call) + ", path " + c.last_allreduce_path());
        paths.push_back(c.last_allreduce_path());
      }
      const size_t bytes = count * sizeof(float);
      if (!measure) {
        expect(c.allreduce_measurements() == 0, "measured with measure_allreduce=false");
        expect(c.measured_allreduce(bytes) == Algorithm::kAuto, "a choice without measuring");
        for (const auto& p : paths)
          expect(p.rfind("hierarchical", 0) == 0, "measure off: " + p);
        return;
      }
      expect(c.allreduce_measurements() == 1,
             "measurements: " + std::to_string(c.allreduce_measurements()) + ", expected 1");
      const Algorithm chosen = c.measured_allreduce(bytes);
      expect(chosen == Algorithm::kHierarchical || chosen == Algorithm::kRing,
             std::string("measured choice: ") + name(chosen));
      expect(c.allreduce_algorithm(bytes) == chosen, "allreduce_algorithm ignores the measurement");
      // Measured before the first call: every call ran the choice.
      const std::string want = chosen == Algorithm::kRing ? "ring" : "hierarchical";
      for (int call = 0; call < 4; ++call)
        expect(paths[call].rfind(want, 0) == 0, "call " + std::to_string(call) + " ran " +
                                                    paths[call] + ", measured " + want);
      // Every rank chose the same form.
      int choice[2] = {static_cast<int>(chosen), -static_cast<int>(chosen)};
      c.allreduce(choice, 2, DataType::i32, ReduceOp::max);
      expect(choice[0] == -choice[1], "ranks measured different forms");
    }, o);
  }
}

// Ranks whose buffers sit at different offsets mod 64 (the single-copy form then copies
// through placed scratch; the slots and the direct form place data at each writer's offset).
TEST_P(Collectives, AllreduceAtMisalignedOffsets) {
  using Form = CommunicatorOptions::ShmForm;
  for (Form form : {Form::kDirect, Form::kSlots, Form::kSingleCopy}) {
    CommunicatorOptions o;
    o.shm_small_bytes = 0;
    o.shm_form = form;
    run([](Communicator& c) {
      const int n = c.size(), r = c.rank();
      const size_t count = 20011, skip = (1 + 3 * static_cast<size_t>(r)) % 16;  // floats
      std::vector<float> storage(count + 16 + 64);
      float* x = storage.data() + skip;
      for (size_t i = 0; i < count; ++i) x[i] = static_cast<float>(contribution(r, i));
      c.allreduce(x, count, DataType::f32, ReduceOp::sum);
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i)
        wrong += x[i] != static_cast<float>(expected(ReduceOp::sum, DataType::f32, n, i));
      expect(wrong == 0, std::to_string(wrong) + " wrong elements at offset " +
                             std::to_string(skip * 4) + " B, path " + c.last_allreduce_path());
    }, o);
  }
}

// bf16 wire compression is lossy: within bf16's precision of the exact f32 sum (relative
// 2^-8 per rounding, a few roundings), and identical on every rank.
TEST_P(Collectives, AllreduceBf16WireCompression) {
  run([](Communicator& c) {
    const int n = c.size(), r = c.rank();
    for (size_t count : {size_t{0}, size_t{1}, size_t{97}, size_t{100003}}) {
      std::vector<float> x(count), exact(count, 0.0f);
      for (size_t i = 0; i < count; ++i) {
        x[i] = 1.0f + 0.001f * static_cast<float>(r) + 0.37f * static_cast<float>(i % 11);
        for (int q = 0; q < n; ++q)
          exact[i] += 1.0f + 0.001f * static_cast<float>(q) + 0.37f * static_cast<float>(i % 11);
      }
      c.allreduce(x.data(), x.data(), count, DataType::f32, ReduceOp::sum, Compression::kBf16);
      double largest = 0;
      for (size_t i = 0; i < count; ++i)
        largest = std::max(largest, static_cast<double>(std::abs(x[i] - exact[i]) / exact[i]));
      const double kTolerance = 0.02;  // bf16: 8 significant bits, rounded once per step
      expect(largest <= kTolerance, "bf16 allreduce: largest relative difference " +
                                        std::to_string(largest) + " > " + std::to_string(kTolerance));
      // Every rank holds the same bits.
      std::vector<float> first(x);
      c.broadcast(first.data(), count, DataType::f32, 0);
      expect(std::memcmp(first.data(), x.data(), count * sizeof(float)) == 0,
             "bf16 allreduce results differ between ranks");
    }
  });
}

TEST_P(Collectives, ReduceScatterAllgatherAlltoall) {
  run([](Communicator& c) {
    check_reduce_scatter(c);
    check_allgather(c);
    check_alltoall(c);
  });
}

TEST_P(Collectives, BroadcastTreeAndChain) {
  for (Algorithm a : {Algorithm::kTree, Algorithm::kChain}) {
    CommunicatorOptions o;
    o.broadcast_algorithm = a;
    run(check_broadcast, o);
  }
}

TEST_P(Collectives, ReduceSendRecvBarrier) {
  test::StoreProcess store;
  const int n = world();
  const std::string counter = "test/barrier-counter-" + std::to_string(n);
  run([&](Communicator& c) {
    check_reduce(c);
    check_send_recv(c);
    // Barrier: no rank may leave before every rank has entered.
    auto s = store.connect();
    if (c.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    s->add(counter, 1);
    c.barrier();
    expect(s->add(counter, 0) == n, "a rank left the barrier before all entered");
    c.barrier();  // nobody resets or reuses the counter while others still read it
  });
}

TEST_P(Collectives, SplitByParity) {
  run([](Communicator& c) {
    const int n = c.size(), r = c.rank();
    // Odd ranks ordered by descending rank (key = -rank); rank 0 sits out (color -1).
    const int color = r == 0 && n > 1 ? -1 : r % 2;
    auto sub = c.split(color, -r);
    // The parent keeps working after the split, for every rank.
    int32_t y = 1;
    c.allreduce(&y, 1, DataType::i32, ReduceOp::sum);
    expect(y == n, "parent allreduce after split");
    if (color < 0) {
      expect(sub == nullptr, "color -1 must give no communicator");
      return;
    }
    int members = 0, sum = 0, higher = 0;
    for (int q = 0; q < n; ++q) {
      if ((q == 0 && n > 1 ? -1 : q % 2) != color) continue;
      ++members;
      sum += q;
      higher += q > r;
    }
    expect(sub->size() == members, "split size");
    expect(sub->rank() == higher, "split rank follows the key");
    int32_t x = r;
    sub->allreduce(&x, 1, DataType::i32, ReduceOp::sum);
    expect(x == sum, "allreduce inside the split group");
  });
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, Layout>>& info) {
  static const char* kLayouts[] = {"tcp", "shm", "two_hosts"};
  return "world" + std::to_string(std::get<0>(info.param)) + "_" +
         kLayouts[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, Collectives,
    ::testing::Combine(::testing::Values(1, 2, 3, 4, 7),
                       ::testing::Values(Layout::kTcp, Layout::kShm, Layout::kTwoHosts)),
    param_name);

// Forcing an algorithm reports the one that really runs: allreduce has no tree or chain
// (their allreduce forms are recursive doubling and the ring), broadcast no ring.
TEST(CollectivesNames, ForcedAlgorithmsNameWhatRuns) {
  test::StoreProcess store;
  CommunicatorOptions o;
  o.shared_memory = false;
  o.allreduce_algorithm = Algorithm::kTree;
  o.broadcast_algorithm = Algorithm::kRing;
  auto res = test::run_world(3, store, [](Communicator& c) {
    expect(c.allreduce_algorithm(4096) == Algorithm::kRecursiveDoubling, "tree allreduce");
    expect(c.broadcast_algorithm(1 << 20) == Algorithm::kChain, "ring broadcast");
    float x = 1;
    c.allreduce(&x, 1, DataType::f32, ReduceOp::sum);
    expect(c.last_allreduce_path() == "recursive_doubling", c.last_allreduce_path());
  }, o);
  EXPECT_TRUE(res.all_ok()) << res.summary();
  o.allreduce_algorithm = Algorithm::kChain;
  test::StoreProcess store2;
  res = test::run_world(2, store2, [](Communicator& c) {
    float x = 1;
    c.allreduce(&x, 1, DataType::f32, ReduceOp::sum);
    expect(c.last_allreduce_path() == "ring", c.last_allreduce_path());
  }, o);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

}  // namespace
}  // namespace heft::comm
