// ctest-labels: unit
// Pipeline schedules and the partitioner: every generated action list for p <= 8 stages and
// m <= 32 micro-batches passes the simulator (no deadlock), in simple and interleaved form;
// interleaved never has more than active_microbatches in flight; the bubble with equal
// stages is the theory's (p-1)/(m+p-1); a list missing a send is caught as a deadlock naming
// the stage; the partitioner finds known optima for speed, memory and mixed weights and
// breaks ties by the activation bytes crossing the cuts.
#include "heft/parallel/pipeline/schedule.h"

#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace heft::parallel::pipeline
