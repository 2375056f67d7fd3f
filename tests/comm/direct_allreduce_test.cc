// ctest-labels: multiproc
// The direct shared-memory allreduce (algo/shm_allreduce.h): exact for every dtype and op
// over world sizes 1-7 at misaligned offsets and with many pipeline pieces; the form auto
// takes per size is fixed by a rule (small up to shm_small_bytes, direct above), the same in
// two lifetimes; and it synchronises less than the slots did, flat and hierarchical (the
// counts, not times: one sync per piece plus one, and one cross-host call per allreduce).
// And the form for ranks that share a core (reduced on each core first): exact over worlds
// 3-7 and group sizes, taken from the CPUs the ranks are bound to, the same bits on every
// rank. Real forked ranks.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "support/ranks.h"
#include "support/values.h"

namespace heft::comm {
namespace {

using test::Buffer;
using test::expect;

// Rank r's element i: small integers, exact in every dtype under sum, min and max.
double contribution(int r, size_t i) {
  return static_cast<double>((r + 1) * (i % 2 ? -1 : 1)) + static_cast<double>(i % 3);
}

double expected(ReduceOp op, int n, size_t i) {
  double acc = contribution(0, i);
  for (int r = 1; r < n; ++r) {
    const double x = contribution(r, i);
    acc = op == ReduceOp::sum ? acc + x : op == ReduceOp::min ? std::min(acc, x) : std::max(acc, x);
  }
  return acc;
}

// Worlds 1-7 on one host, the direct form forced, 4 KiB slots (so a 20011-element buffer
// takes many pieces per slice), each rank's buffer at its own offset mod 64.
TEST(DirectAllreduce, ExactOverWorldsAndOffsets) {
  for (int n = 1; n <= 7; ++n) {
    test::StoreProcess store;
    CommunicatorOptions o;
    o.shm_form = CommunicatorOptions::ShmForm::kDirect;
    o.shm_small_bytes = 0;
    o.shm_chunk_bytes = 4096;
    o.timeout = std::chrono::seconds(60);
    // Near: the cached stores. Measured, a probe that reads far (a loaded machine, or a host
    // whose round trip sits between the two, 198 ns on one Xeon) streams the slots instead.
    o.shm_placement = CommunicatorOptions::ShmPlacement::kNear;
    auto res = test::run_world(n, store, [n](Communicator& c) {
      const int r = c.rank();
      for (DataType t : {DataType::f32, DataType::f64, DataType::bf16, DataType::i32})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max})
          for (size_t count : {size_t{1}, size_t{97}, size_t{20011}}) {
            const size_t skip = (1 + 3 * static_cast<size_t>(r)) % 17;  // elements
            Buffer b(t, count + skip);
            for (size_t i = 0; i < count; ++i) b.set(skip + i, contribution(r, i));
            c.allreduce(b.at(skip), count, t, op);
            size_t wrong = 0;
            for (size_t i = 0; i < count; ++i) wrong += b.get(skip + i) != expected(op, n, i);
            expect(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count) +
                                   " " + name(t) + " " + name(op) + " world " +
                                   std::to_string(n) + " path " + c.last_allreduce_path());
          }
      const shm::PathCounts k = c.shm_path_counts();
      if (n == 1) return expect(k.direct == 0 && !c.has_shared_memory(), "world 1 shared memory");
      expect(k.direct == 36 && k.small + k.slots + k.single_copy == 0,
             "every call direct: direct=" + std::to_string(k.direct));
      expect(k.streamed == 0, "streamed " + std::to_string(k.streamed) + " pieces by default");
      expect(c.last_allreduce_path() == "shm/direct", c.last_allreduce_path());
    }, o);
    EXPECT_TRUE(res.all_ok()) << "world " << n << "\n" << res.summary();
  }
}

// HEFT_SHM_STREAM_SLOTS: the direct form's slot writes streamed (non-temporal stores, which
// the copy kernel fences), exact at misaligned offsets over odd and even worlds, counted.
TEST(DirectAllreduce, StreamedSlotsExactAndCounted) {
  for (int n : {2, 3, 7}) {
    test::StoreProcess store;
    CommunicatorOptions o;
    o.shm_form = CommunicatorOptions::ShmForm::kDirect;
    o.shm_small_bytes = 0;
    o.shm_chunk_bytes = 4096;
    o.shm_stream_slots = true;
    o.timeout = std::chrono::seconds(60);
    auto res = test::run_world(n, store, [n](Communicator& c) {
      const int r = c.rank();
      for (DataType t : {DataType::f32, DataType::bf16, DataType::f64})
        for (size_t count : {size_t{97}, size_t{20011}, size_t{1} << 18}) {
          const size_t skip = (5 + 3 * static_cast<size_t>(r)) % 17;  // elements
          Buffer b(t, count + skip);
          for (size_t i = 0; i < count; ++i) b.set(skip + i, contribution(r, i));
          c.allreduce(b.at(skip), count, t, ReduceOp::sum);
          size_t wrong = 0;
          for (size_t i = 0; i < count; ++i)
            wrong += b.get(skip + i) != expected(ReduceOp::sum, n, i);
          expect(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count) + " " +
                                 name(t) + " world " + std::to_string(n));
        }
      const shm::PathCounts k = c.shm_path_counts();
      expect(k.direct == 9 && k.streamed > 0,
             "direct=" + std::to_string(k.direct) + " streamed=" + std::to_string(k.streamed));
    }, o);
    EXPECT_TRUE(res.all_ok()) << "world " << n << "\n" << res.summary();
  }
}

// The form per size under auto, for 2 and 4 ranks, in two lifetimes: the rule, every time.
TEST(DirectAllreduce, AutoChoiceIsARule) {
  for (int n : {2, 4}) {
    std::vector<std::string> first;
    for (int lifetime = 0; lifetime < 2; ++lifetime) {
      test::StoreProcess store;
      auto res = test::run_world(n, store, [&](Communicator& c) {
        std::string paths;
        for (size_t bytes = 4096; bytes <= (size_t{4} << 20); bytes *= 4) {
          std::vector<float> x(bytes / 4, 1.0f);
          for (int call = 0; call < 2; ++call) {
            c.allreduce(x.data(), x.size(), DataType::f32, ReduceOp::sum);
            const std::string want = bytes <= (16 << 10) ? "shm/small" : "shm/direct";
            expect(c.last_allreduce_path() == want, std::to_string(bytes) + " B took " +
                                                        c.last_allreduce_path() + ", want " + want);
          }
          expect(x[0] == static_cast<float>(n * n), "wrong sum at " + std::to_string(bytes));
        }
        const shm::PathCounts k = c.shm_path_counts();
        expect(k.small == 4 && k.direct == 8 && k.slots + k.single_copy == 0,
               "counts small=" + std::to_string(k.small) + " direct=" + std::to_string(k.direct));
      });
      EXPECT_TRUE(res.all_ok()) << n << " ranks, lifetime " << lifetime << "\n" << res.summary();
    }
  }
}

// Synchronisations per 1 MiB allreduce with 256 KiB slots (Zen 3's default): flat on 2
// ranks, one per 256 KiB piece of a slice plus one (3; the slots took 8); hierarchical on
// 2 x 2, one per piece in each half (4; per-chunk slots took 8, with 4 cross-host calls
// besides). With 512 KiB slots (Zen 4 and 5's default) the flat form takes 2.
TEST(DirectAllreduce, FewerSynchronisations) {
  const size_t count = (1 << 20) / 4;
  for (auto [hierarchical, chunk] : {std::pair{false, size_t{256} << 10}, std::pair{true, size_t{256} << 10},
                                     std::pair{false, size_t{512} << 10}}) {
    test::StoreProcess store;
    const int n = hierarchical ? 4 : 2;
    const std::vector<std::string> hosts =
        hierarchical ? test::split_hosts(4, 2) : std::vector<std::string>{};
    CommunicatorOptions o;
    o.measure_allreduce = false;  // hierarchical at every size
    o.shm_chunk_bytes = chunk;
    const unsigned want_syncs = hierarchical ? 4u : chunk == (size_t{512} << 10) ? 2u : 3u;
    auto res = test::run_world(n, store, [&](Communicator& c) {
      std::vector<float> x(count, 1.0f);
      c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);  // warm
      const uint64_t before = c.shm_path_counts().syncs;
      c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
      const uint64_t syncs = c.shm_path_counts().syncs - before;
      expect(x[count - 1] == static_cast<float>(n * n), "wrong sum");
      const std::string want = hierarchical ? "hierarchical(shm/direct)" : "shm/direct";
      expect(c.last_allreduce_path() == want, c.last_allreduce_path());
      expect(syncs == want_syncs, want + ": " + std::to_string(syncs) + " synchronisations per 1 MiB allreduce with " +
                                      std::to_string(chunk >> 10) + " KiB slots");
    }, o, std::chrono::seconds(120), hosts);
    EXPECT_TRUE(res.all_ok()) << (hierarchical ? "2 x 2" : "2 ranks") << "\n" << res.summary();
  }
}

// The default slot size follows the L2 cache: half of it, a multiple of 4 KiB, 64 KiB to
// 1 MiB, 256 KiB where unknown; CommunicatorOptions takes this machine's.
TEST(DirectAllreduce, DefaultChunkFromL2) {
  EXPECT_EQ(comm::default_shm_chunk_bytes(1 << 20), size_t{512} << 10);  // Zen 4, Zen 5
  EXPECT_EQ(comm::default_shm_chunk_bytes(512 << 10), size_t{256} << 10);  // Zen 3
  EXPECT_EQ(comm::default_shm_chunk_bytes(2 << 20), size_t{1} << 20);  // Intel server cores
  EXPECT_EQ(comm::default_shm_chunk_bytes(4 << 20), size_t{1} << 20);
  EXPECT_EQ(comm::default_shm_chunk_bytes(64 << 10), size_t{64} << 10);
  EXPECT_EQ(comm::default_shm_chunk_bytes(1280 << 10), size_t{640} << 10);
  EXPECT_EQ(comm::default_shm_chunk_bytes((1 << 20) + 100), size_t{512} << 10);  // 4 KiB multiple
  EXPECT_EQ(comm::default_shm_chunk_bytes(0), size_t{256} << 10);  // unknown
  const size_t here = comm::default_shm_chunk_bytes();
  EXPECT_EQ(CommunicatorOptions{}.shm_chunk_bytes, here);
  EXPECT_TRUE(here % 4096 == 0 && here >= (64 << 10) && here <= (1 << 20)) << here;
}

// The last fold of the direct form stores into the user's buffer and the out area in one
// pass (reduce_to_both) for a native dtype, counted; an average, which must be divided
// before it is shared, and bf16 take the two passes; every result exact.
TEST(DirectAllreduce, OnePassWhereItCanRun) {
  // Near (the one pass runs there; far streams the slots): a measured placement made this
  // test fail under load on a Xeon whose round trip (198 ns) sits between near and far.
  CommunicatorOptions o;
  o.shm_placement = CommunicatorOptions::ShmPlacement::kNear;
  for (int n : {2, 3}) {
    test::StoreProcess store;
    auto res = test::run_world(n, store, [n](Communicator& c) {
      const int r = c.rank();
      // 1 MiB of f32: each slice starts a multiple of 4 KiB into the buffer, so its pieces
      // lie where the peers' copies do modulo 4 KiB (an odd count would move them 64 bytes
      // on, into the window where reduce_to_both takes two passes: exact as well).
      const size_t count = size_t{1} << 18;
      struct Case {
        DataType t;
        ReduceOp op;
        bool one_pass;
      };
      for (const Case& k : {Case{DataType::f32, ReduceOp::sum, true},
                            Case{DataType::i32, ReduceOp::max, true},
                            Case{DataType::f32, ReduceOp::avg, false},
                            Case{DataType::bf16, ReduceOp::sum, false}}) {
        // The buffer 16 bytes into a page, where a fresh mmap'd malloc puts it: a freed 1 MiB
        // raises glibc's mmap threshold, and the next one, from the heap, could start where
        // the slices' pieces fall into the window (seen once under load).
        const size_t es = element_size(k.t);
        Buffer b(k.t, count + 8192 / es);
        const auto addr = reinterpret_cast<uintptr_t>(b.at(0));
        const size_t skip = ((4096 + 16 - addr % 4096) % 4096) / es;
        for (size_t i = 0; i < count; ++i) b.set(skip + i, contribution(r, i));
        const uint64_t before = c.shm_path_counts().one_pass;
        c.allreduce(b.at(skip), count, k.t, k.op);
        const uint64_t pieces = c.shm_path_counts().one_pass - before;
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) {
          // avg: the f32 sum divided in f32, as finish_average does.
          const double want =
              k.op == ReduceOp::avg
                  ? static_cast<double>(static_cast<float>(expected(ReduceOp::sum, n, i)) /
                                        static_cast<float>(n))
                  : expected(k.op, n, i);
          wrong += b.get(skip + i) != want;
        }
        const std::string what = std::string(name(k.t)) + " " + name(k.op) + " on " +
                                 std::to_string(n) + " ranks";
        expect(wrong == 0, std::to_string(wrong) + " wrong, " + what);
        // The plan asked for (near: cached stores, where the one pass runs), then what the
        // direct form did under it: none may take the one pass when it cannot run.
        const AllreducePlan plan = c.last_allreduce_plan();
        expect(plan.algorithm == Algorithm::kShm && plan.shm == ShmStep::kDirect && !plan.far,
               what + ": planned " + plan.path() + (plan.far ? " far" : ""));
        expect(k.one_pass ? pieces > 0 : pieces == 0,
               what + ": " + std::to_string(pieces) + " one-pass pieces");
      }
    }, o);
    EXPECT_TRUE(res.all_ok()) << n << " ranks\n" << res.summary();
  }
}

// Ranks that share a core (CommunicatorOptions::shm_core_group, forced here: consecutive
// ranks in groups of 2 or 3, whatever the binding). The placement forced far: above
// shm_cores_min_bytes every call takes the core-grouped form; near: the flat direct form,
// folding group by group; both counted; exact for every dtype and op over worlds 3-7 at
// misaligned offsets with many pieces per step, averages within rounding.
TEST(CoreGroupedAllreduce, ExactOverWorldsGroupsAndOffsets) {
  using P = CommunicatorOptions::ShmPlacement;
  for (P placement : {P::kFar, P::kNear})
  for (int group : {2, 3}) {
    for (int n = 3; n <= 7; ++n) {
      if (n <= group) continue;  // a single group: the flat forms
      test::StoreProcess store;
      CommunicatorOptions o;
      o.shm_core_group = group;
      o.shm_placement = placement;
      o.shm_cores_min_bytes = 0;
      o.shm_small_bytes = 0;
      o.shm_chunk_bytes = 4096;
      o.timeout = std::chrono::seconds(60);
      const bool far = placement == P::kFar;
      auto res = test::run_world(n, store, [n, far](Communicator& c) {
        const int r = c.rank();
        uint64_t calls = 0;
        for (DataType t : {DataType::f32, DataType::f64, DataType::bf16, DataType::i32})
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::max, ReduceOp::avg})
            for (size_t count : {size_t{1}, size_t{97}, size_t{20011}}) {
              if (op == ReduceOp::avg && t == DataType::i32) continue;
              const size_t skip = (1 + 3 * static_cast<size_t>(r)) % 17;  // elements
              Buffer b(t, count + skip);
              for (size_t i = 0; i < count; ++i) b.set(skip + i, contribution(r, i));
              c.allreduce(b.at(skip), count, t, op);
              ++calls;
              size_t wrong = 0;
              for (size_t i = 0; i < count; ++i) {
                const double want = op == ReduceOp::avg ? expected(ReduceOp::sum, n, i) / n
                                                        : expected(op, n, i);
                const double tol = op != ReduceOp::avg ? 0 : t == DataType::bf16 ? 0.02 : 1e-6;
                wrong += std::fabs(b.get(skip + i) - want) > tol * std::max(1.0, std::fabs(want));
              }
              expect(wrong == 0, std::to_string(wrong) + " wrong of " + std::to_string(count) +
                                     " " + name(t) + " " + name(op) + " world " +
                                     std::to_string(n) + " path " + c.last_allreduce_path());
              const std::string want = far ? "shm/cores" : "shm/direct";
              expect(c.last_allreduce_path() == want, c.last_allreduce_path() + ", want " + want);
            }
        const shm::PathCounts k = c.shm_path_counts();
        expect((far ? k.cores : k.direct) == calls && (far ? k.direct : k.cores) == 0 &&
                   k.small + k.slots == 0,
               "cores=" + std::to_string(k.cores) + " direct=" + std::to_string(k.direct) +
                   " of " + std::to_string(calls) + " calls");
      }, o);
      EXPECT_TRUE(res.all_ok()) << "world " << n << ", groups of " << group
                                << (far ? ", far" : ", near") << "\n" << res.summary();
    }
  }
}

// Either form adds group by group, so the choice between them (the placement, which the
// host changes within seconds) never changes a bit: float sums with values that round
// differently by order, forced groups of 2 and 3 over worlds 4-7, far (core-grouped form)
// and near (the flat direct form): every rank holds exactly the group-by-group fold of the
// inputs (allgathered), which differs from the local-rank-order fold somewhere.
TEST(CoreGroupedAllreduce, BothFormsGiveTheGroupOrdersBits) {
  using P = CommunicatorOptions::ShmPlacement;
  for (P placement : {P::kFar, P::kNear})
  for (auto [group, n] : {std::pair{2, 4}, std::pair{2, 5}, std::pair{3, 7}}) {
    test::StoreProcess store;
    CommunicatorOptions o;
    o.shm_core_group = group;
    o.shm_placement = placement;
    o.shm_chunk_bytes = 16384;  // several pieces per slice
    auto res = test::run_world(n, store, [n, group = group](Communicator& c) {
      const int rank = c.rank();
      const size_t count = 100003;  // above the 128 KiB default, odd
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i)
        x[i] = ((i + rank) % 3 == 0 ? 1e4f : 1.0f) *
               static_cast<float>(1 + (i * 7 + rank * 13) % 101) / static_cast<float>(rank + 3);
      std::vector<float> in(n * count);
      c.allgather(x.data(), in.data(), count, DataType::f32);
      c.allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
      size_t off = 0, orders_differ = 0;
      for (size_t i = 0; i < count; ++i) {
        float by_group = 0, flat = in[i];
        for (int p = 1; p < n; ++p) flat += in[p * count + i];
        for (int g = 0; g * group < n; ++g) {
          float sum = in[g * group * count + i];
          for (int p = g * group + 1; p < std::min(n, (g + 1) * group); ++p) sum += in[p * count + i];
          by_group = g == 0 ? sum : by_group + sum;
        }
        off += std::memcmp(&x[i], &by_group, 4) != 0;
        orders_differ += by_group != flat;
      }
      expect(off == 0, std::to_string(off) + " elements not the group-by-group fold, path " +
                           c.last_allreduce_path());
      expect(orders_differ > 0, "the two orders give the same bits: the check shows nothing");
    }, o);
    EXPECT_TRUE(res.all_ok()) << "world " << n << ", groups of " << group << "\n"
                              << res.summary();
  }
}

// The groups follow the CPUs the ranks are bound to (as the launcher packs 4 ranks on 2
// CPUs: 0, 0, 1, 1) under the default (auto): float sums with values that round
// differently by order come out the same bits on every rank (compared through an
// allgather), adding core by core, (x0 + x1) + (x2 + x3), whichever form the placement
// picks (far: the core-grouped form; near: the flat direct form; measured: either); up to
// shm_cores_min_bytes the flat forms run; unbound ranks are not grouped (the flat direct
// form adds x0, x1, x2, x3 in turn).
TEST(CoreGroupedAllreduce, GroupsFromTheBindingSameBitsOnEveryRank) {
  cpu_set_t allowed;
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "needs 2 CPUs, has " << cpus.size();
  using P = CommunicatorOptions::ShmPlacement;
  for (auto [bound, placement] : {std::pair{true, P::kFar}, std::pair{true, P::kNear},
                                  std::pair{true, P::kMeasure}, std::pair{false, P::kFar}}) {
    test::StoreProcess store;
    static int worlds = 0;
    const std::string group = "test/cores" + std::to_string(worlds++);
    auto res = test::run_ranks(4, [&](int rank) {
      if (bound) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpus[rank / 2], &one);
        expect(sched_setaffinity(0, sizeof(one), &one) == 0, "sched_setaffinity");
      }
      CommunicatorOptions o;
      o.token = store.token();
      o.shm_placement = placement;
      auto c = Communicator::create(store.connect(), group, rank, 4, o);
      const size_t count = size_t{1} << 16;  // 256 KiB: above the default 128 KiB
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i)  // magnitudes apart, so the order shows in the bits
        x[i] = ((i + rank) % 3 == 0 ? 1e4f : 1.0f) *
               static_cast<float>(1 + (i * 7 + rank * 13) % 101) / static_cast<float>(rank + 3);
      std::vector<float> mine = x;
      c->allreduce(x.data(), count, DataType::f32, ReduceOp::sum);
      const bool measured = placement == P::kMeasure;
      const bool cores = measured ? c->last_allreduce_path() == "shm/cores"
                                  : bound && placement == P::kFar;
      const std::string want = cores ? "shm/cores" : "shm/direct";
      expect(c->last_allreduce_path() == want, c->last_allreduce_path() + ", want " + want);
      // Every rank holds the same bits.
      std::vector<float> all(4 * count);
      c->allgather(x.data(), all.data(), count, DataType::f32);
      for (int p = 1; p < 4; ++p)
        expect(std::memcmp(all.data(), all.data() + p * count, count * 4) == 0,
               "rank " + std::to_string(p) + "'s result differs from rank 0's");
      // Core by core where that form ran, else in turn; the two orders differ somewhere.
      std::vector<float> in(4 * count);
      c->allgather(mine.data(), in.data(), count, DataType::f32);
      size_t off = 0, orders_differ = 0;
      for (size_t i = 0; i < count; ++i) {
        const float a = in[i], b = in[count + i], d = in[2 * count + i], e = in[3 * count + i];
        const float by_core = (a + b) + (d + e), flat = ((a + b) + d) + e;
        off += x[i] != (bound ? by_core : flat);
        orders_differ += by_core != flat;
      }
      expect(off == 0, std::to_string(off) + " elements not in the order of " +
                           (bound ? "the cores" : "the ranks") + ", path " + want);
      expect(orders_differ > 0, "the two orders give the same bits: the check shows nothing");
      // A small call stays flat.
      float one = 1;
      c->allreduce(&one, 1, DataType::f32, ReduceOp::sum);
      expect(one == 4 && c->last_allreduce_path() == "shm/small", c->last_allreduce_path());
      expect((c->shm_path_counts().cores == 1) == cores,
             "cores=" + std::to_string(c->shm_path_counts().cores));
    });
    EXPECT_TRUE(res.all_ok()) << (bound ? "bound 0, 0, 1, 1" : "unbound") << ", placement "
                              << static_cast<int>(placement) << "\n" << res.summary();
  }
}

}  // namespace
}  // namespace heft::comm
