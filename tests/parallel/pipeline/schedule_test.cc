// ctest-labels: unit
// Pipeline schedules and the partitioner: every generated action list for p <= 8 stages and
// m <= 32 micro-batches passes the simulator (no deadlock), in simple and interleaved form;
// interleaved never has more than active_microbatches in flight; the bubble with equal
// stages is the theory's (p-1)/(m+p-1); a list missing a send is caught as a deadlock naming
// the stage; the partitioner finds known optima for speed, memory and mixed weights and
// breaks ties by the activation bytes crossing the cuts; with a tolerance, profiles that
// differ by noise choose one split, the most even among the near-best; the profiler's
// rounds and medians.
#include "heft/parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>

#include "heft/error.h"
#include "heft/parallel/pipeline/partition.h"

namespace heft::parallel::pipeline {
namespace {

TEST(Schedule, EveryGeneratedListPassesTheSimulatorWithTheTheoreticalBubble) {
  for (const char* kind : {"simple", "interleaved"})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        const Schedule sc = make_schedule(kind, p, m);
        const Simulation sim = simulate(sc);
        ASSERT_TRUE(sim.ok) << kind << " p=" << p << " m=" << m << ": " << sim.error;
        EXPECT_NEAR(sim.bubble, theoretical_bubble(p, m), 1e-9) << kind << " p=" << p << " m=" << m;
        for (int s = 0; s < p; ++s) {
          int forwards = 0, backwards = 0;
          for (const Action& a : sc.actions[s]) {
            forwards += a.kind == ActionKind::kForward;
            backwards += a.kind == ActionKind::kBackward;
          }
          EXPECT_EQ(forwards, m);
          EXPECT_EQ(backwards, m);
          if (std::string(kind) == "simple") EXPECT_EQ(sim.max_in_flight[s], m);
          else EXPECT_LE(sim.max_in_flight[s], std::min(m, p - s));
        }
      }
}

TEST(Schedule, VirtualStagesPassTheSimulatorAndShrinkTheBubble) {
  for (int v = 2; v <= 4; ++v)
    for (int p = 2; p <= 8; ++p)
      for (int m = p; m <= 32; m += p) {
        const Schedule sc = make_schedule("interleaved", p, m, 0, v);
        const Simulation sim = simulate(sc);
        ASSERT_TRUE(sim.ok) << "v=" << v << " p=" << p << " m=" << m << ": " << sim.error;
        const double plain = simulate(make_schedule("interleaved", p, m)).bubble;
        EXPECT_LT(sim.bubble, plain) << "v=" << v << " p=" << p << " m=" << m;
        EXPECT_NEAR(sim.bubble, theoretical_bubble(p, m, v), 0.02)
            << "v=" << v << " p=" << p << " m=" << m;
        for (int s = 0; s < p; ++s) {
          int forwards = 0;
          for (const Action& a : sc.actions[s]) forwards += a.kind == ActionKind::kForward;
          EXPECT_EQ(forwards, m * v);
        }
      }
  EXPECT_THROW(make_schedule("interleaved", 4, 6, 0, 2), InvalidArgument);  // m % p != 0
  EXPECT_THROW(make_schedule("simple", 4, 8, 0, 2), InvalidArgument);
}

TEST(Schedule, InterleavedNeverExceedsActiveMicrobatches) {
  for (int active = 1; active <= 6; ++active) {
    const Schedule sc = make_schedule("interleaved", 6, 16, active);
    const Simulation sim = simulate(sc);
    ASSERT_TRUE(sim.ok) << sim.error;
    for (int s = 0; s < 6; ++s) EXPECT_LE(sim.max_in_flight[s], active) << "stage " << s;
  }
}

TEST(Schedule, AMissingSendIsADeadlockNamingTheStage) {
  Schedule sc = make_schedule("interleaved", 3, 4);
  auto& a = sc.actions[1];
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].kind == ActionKind::kSendActivation && a[i].microbatch == 2) {
      a.erase(a.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  const Simulation sim = simulate(sc);
  EXPECT_FALSE(sim.ok);
  EXPECT_NE(sim.error.find("stage 2 waits on rA2<1"), std::string::npos) << sim.error;
}

TEST(Schedule, RendersAGridWithTheBubble) {
  const Schedule sc = make_schedule("interleaved", 2, 4);
  const std::string text = render(sc, simulate(sc));
  // Stage 0 waits for stage 1's first backward (2 units) before its own.
  EXPECT_NE(text.find("stage 0 |F0  F1  .   .   B0  B0  F2  "), std::string::npos) << text;
  EXPECT_NE(text.find("bubble 0.200 (theory (p-1)/(v*m+p-1) = 0.200)"), std::string::npos) << text;
  EXPECT_THROW(make_schedule("zigzag", 2, 4), InvalidArgument);
  EXPECT_THROW(make_schedule("simple", 0, 4), InvalidArgument);
}

std::vector<LayerCost> layers(const std::vector<double>& time, const std::vector<int64_t>& memory,
                              const std::vector<int64_t>& activation = {}) {
  std::vector<LayerCost> out;
  for (size_t i = 0; i < time.size(); ++i)
    out.push_back({"l" + std::to_string(i), time[i] / 3, 2 * time[i] / 3, memory[i],
                   activation.empty() ? 0 : activation[i]});
  return out;
}

TEST(Partitioner, FindsKnownOptimaForSpeedMemoryAndMixedWeights) {
  // Time favours cutting after layer 2 (3+3 | 6); memory after layer 0 (10 | 5+5).
  const auto l = layers({3, 3, 6}, {10, 5, 5});
  EXPECT_EQ(auto_partition(l, 2, 0.0).first, (std::vector<int>{0, 2}));
  EXPECT_EQ(auto_partition(l, 2, 1.0).first, (std::vector<int>{0, 1}));
  // 0.2 (speed) keeps the time split; 0.8 (memory) takes the memory one.
  EXPECT_EQ(auto_partition(l, 2, 0.2).first, (std::vector<int>{0, 2}));
  EXPECT_EQ(auto_partition(l, 2, 0.8).first, (std::vector<int>{0, 1}));
  // Equal layers into 4 stages of 2; a heavy head gets a stage of its own.
  EXPECT_EQ(auto_partition(layers({1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}), 4, 0.0).first,
            (std::vector<int>{0, 2, 4, 6}));
  EXPECT_EQ(auto_partition(layers({1, 1, 1, 1, 4}, {1, 1, 1, 1, 1}), 2, 0.0).first,
            (std::vector<int>{0, 4}));
}

TEST(Partitioner, BreaksTiesByActivationBytesAcrossTheCuts) {
  // 4 equal layers into 3 stages: the largest stage holds 2 layers in every optimal split:
  // [01][2][3] cuts after layers 1 and 2 (5 + 50 bytes), [0][12][3] after 0 and 2 (50 + 50),
  // [0][1][23] after 0 and 1 (50 + 5). The fewest bytes: 55, and never the middle split.
  const auto t = layers({1, 1, 1, 1}, {1, 1, 1, 1}, {50, 5, 50, 50});
  const Plan p = auto_partition(t, 3, 0.0);
  EXPECT_EQ(p.cut_bytes, 55);
  EXPECT_NE(p.first, (std::vector<int>{0, 1, 3}));
  EXPECT_NEAR(p.max_cost, 0.5, 1e-12);
}

TEST(Partitioner, RefusesMoreStagesThanLayersAndBadBoundaries) {
  const auto l = layers({1, 1}, {1, 1});
  try {
    auto_partition(l, 3, 0.2);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "partitions: expected 1 to the model's 2 layers, found 3");
  }
  EXPECT_THROW(manual_partition(l, {0}, 0.2), InvalidArgument);
  EXPECT_EQ(manual_partition(l, {1}, 0.2).first, (std::vector<int>{0, 1}));
  EXPECT_THROW(auto_partition(l, 1, 1.5), InvalidArgument);
}

// The GPT of the issue (embedding, 3 equal blocks, a head as cheap as the embedding) has two
// optimal 2-stage splits, after block 0 and after block 1; timings perturbed by up to 3%
// pick either without a tolerance, and always the same one with 5%.
TEST(Partitioner, ProfilesDifferingByNoiseChooseOneSplitWithinTheTolerance) {
  const std::vector<double> time{0.3, 1, 1, 1, 0.3};
  uint64_t state = 12345;
  auto noise = [&state] {  // uniform in [-0.03, 0.03], a fixed sequence
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (static_cast<double>(state >> 11) / 9007199254740992.0 - 0.5) * 0.06;
  };
  std::set<std::vector<int>> exact, tolerant;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> t = time;
    for (double& x : t) x *= 1 + noise();
    const auto l = layers(t, {1, 1, 1, 1, 1}, {8, 8, 8, 8, 8});
    exact.insert(auto_partition(l, 2, 0.0).first);
    tolerant.insert(auto_partition(l, 2, 0.0, 0.05).first);
  }
  EXPECT_EQ(exact.size(), 2u) << "without a tolerance the noise should flip the split";
  ASSERT_EQ(tolerant.size(), 1u);
  EXPECT_EQ(*tolerant.begin(), (std::vector<int>{0, 3}));  // the fixed order's: latest cut
}

TEST(Partitioner, WithinTheToleranceTakesTheMostEvenLayerCounts) {
  // After layer 0 is optimal (1 | 1.96); after layer 1 is 2% worse (2 | 0.96) and evener.
  const auto l = layers({1, 1, 0.9, 0.02, 0.02, 0.02}, {1, 1, 1, 1, 1, 1});
  EXPECT_EQ(auto_partition(l, 2, 0.0).first, (std::vector<int>{0, 1}));
  EXPECT_EQ(auto_partition(l, 2, 0.0, 0.05).first, (std::vector<int>{0, 2}));
  // Fewer cut bytes still come first: a cut after layer 0 costing nothing wins back.
  const auto cheap_cut = layers({1, 1, 0.9, 0.02, 0.02, 0.02}, {1, 1, 1, 1, 1, 1}, {0, 9, 9, 9, 9, 9});
  EXPECT_EQ(auto_partition(cheap_cut, 2, 0.0, 0.05).first, (std::vector<int>{0, 1}));
  // The same costs, the same plan, every time.
  EXPECT_EQ(auto_partition(l, 2, 0.0, 0.05).first, auto_partition(l, 2, 0.0, 0.05).first);
  EXPECT_THROW(auto_partition(l, 2, 0.0, -0.1), InvalidArgument);
  EXPECT_THROW(auto_partition(l, 2, 0.0, std::nan("")), InvalidArgument);
}

TEST(Profiler, TimesEveryLayerOnceARoundAfterWarmupAndTakesTheMedian) {
  std::vector<LayerCost> l(3);
  std::vector<int> calls;
  ProfileOptions o;
  o.warmup = 2;
  o.repeats = 5;
  profile_layers(l, o, [&](int layer, double* f, double* b) {
    const int round = static_cast<int>(calls.size()) / 3;
    calls.push_back(layer);
    // Warm-up rounds are slow; round 4 is a burst of load on every layer.
    const double slow = round < 2 ? 100 : round == 4 ? 50 : 1;
    *f = slow * (layer + 1) * (1 + 0.01 * round);
    *b = 2 * *f;
  });
  const std::vector<int> expected{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
  EXPECT_EQ(calls, expected);  // round after round, each layer in order
  // Timed rounds 2..6: (1.02, 1.03, 50 x 1.04, 1.05, 1.06) x (layer + 1): median 1.05.
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(l[static_cast<size_t>(i)].forward_s, 1.05 * (i + 1), 1e-12) << "layer " << i;
    EXPECT_NEAR(l[static_cast<size_t>(i)].backward_s, 2.10 * (i + 1), 1e-12) << "layer " << i;
  }
  o.repeats = 0;
  try {
    profile_layers(l, o, [](int, double*, double*) {});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "profile repeats: expected at least 1 round, found 0");
  }
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

TEST(Partitioner, DescribesPredictedAndMeasuredStageTimesSideBySide) {
  // 4 layers, 2 stages x 2 virtual: stage 0 holds chunks 0 (l0) and 2 (l2).
  const auto l = layers({0.003, 0.006, 0.009, 0.012}, {1, 1, 1, 1});
  const Plan p = manual_partition(l, {1, 2, 3}, 0.2);
  const std::string text = describe_measured(p, l, 2, {0.024, 0.018}, "steps 2-10");
  EXPECT_NE(text.find("measured (steps 2-10)"), std::string::npos) << text;
  EXPECT_NE(text.find("0      l0, l2                                 12.00        24.00                2.00"),
            std::string::npos) << text;
  EXPECT_NE(text.find("1      l1, l3                                 18.00        18.00                1.00"),
            std::string::npos) << text;
  EXPECT_THROW(describe_measured(p, l, 2, {0.1}, "x"), InvalidArgument);
}

}  // namespace
}  // namespace heft::parallel::pipeline
