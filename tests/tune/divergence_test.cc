// ctest-labels: unit
// Diverged trials (src/heft/tune/divergence.h): the rule marks a non-finite objective or
// loss, a loss that ended above its start, and an objective worse than a set bound, and
// nothing else (not a healthy CNN run whose last, partial batch reads high); the loss metric defaults as documented; fed to the Bayesian search as
// failures (observe_failure), diverged configurations make the next suggestions leave their
// region, where forgetting them (the old handling) sends the search back into it; Hyperband
// counts a diverged trial's scores as worse than any.
#include "heft/tune/divergence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "heft/tune/bayesian_search.h"
#include "heft/tune/hyperband.h"

namespace heft::tune {
namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();

std::string reason(const DivergenceRule& rule, bool maximize, std::optional<double> objective,
                   const std::vector<double>& loss) {
  return divergence_reason(rule, maximize, "test:acc", objective, "train:loss", loss);
}

TEST(Divergence, TheRuleMarksNonFiniteAndRisingLossesAndNothingElse) {
  const DivergenceRule rule;
  // Healthy: the loss fell.
  EXPECT_EQ(reason(rule, true, 0.8, {2.3, 1.1, 0.6}), "");
  // One value cannot rise; a flat loss is not above its first.
  EXPECT_EQ(reason(rule, true, 0.8, {2.3}), "");
  EXPECT_EQ(reason(rule, true, 0.8, {2.3, 2.3}), "");
  EXPECT_EQ(reason(rule, true, kNan, {2.3, 1.0}), "test:acc is nan");
  EXPECT_EQ(reason(rule, true, std::numeric_limits<double>::infinity(), {}), "test:acc is inf");
  EXPECT_EQ(reason(rule, true, 0.1, {2.3, kNan, kNan}), "train:loss became nan (value 2 of 3)");
  EXPECT_EQ(reason(rule, true, 0.1, {2.30, 9.1, 2.31}), "train:loss ended at 2.31, above its start 2.3");
  EXPECT_EQ(reason(rule, true, 0.1, {2.3, 2.1, 2.5, 3.0, 4.0, 9.0, 7.0, 8.0}),
            "train:loss ended at 7.5, above its start 2.2 (medians of its first and last 2 of 8 values)");
}

// Two of the CNN's trials (examples/tune-fashion.yaml with the old ranges, log_every 10,
// 2026-11-25): train:loss as logged.
const std::vector<double> kHealthy = {0.9956, 0.8308, 0.7473, 0.7807, 0.6794, 0.5261, 0.5934,
                                      0.4292, 0.4973, 0.6664, 0.6168, 0.6989, 0.5277, 0.4862,
                                      0.4679, 0.4797, 0.4947, 0.4111, 0.4417, 1.0174};  // last: 3 samples
const std::vector<double> kCollapsed = {6.1016, 2.3947, 2.2791, 2.3607, 2.3126, 2.5306, 2.2798,
                                        2.3399, 2.3360, 2.3106, 2.2989, 2.3576, 2.3098, 2.3279};

TEST(Divergence, ACnnsNoisyLastBatchIsNotDivergenceAndACollapseNeedsTheObjectiveBound) {
  DivergenceRule rule;
  // The last value alone (1.0174) is above the first (0.9956): the quarters' medians are not.
  EXPECT_EQ(reason(rule, true, 0.8225, kHealthy), "");
  // adamw at lr 0.18: a spike to 6.1, then chance (2.30 = log 10) to the end, test:acc 0.1.
  EXPECT_EQ(reason(rule, true, 0.1, kCollapsed), "");
  rule.objective_worse_than = 0.15;
  EXPECT_EQ(reason(rule, true, 0.1, kCollapsed), "test:acc 0.1 is worse than diverged_if.objective_worse_than 0.15");
  EXPECT_EQ(reason(rule, true, 0.8225, kHealthy), "");
  // No objective recorded: the loss rules still apply.
  EXPECT_NE(reason(rule, false, std::nullopt, {1.0, 2.0}), "");
}

TEST(Divergence, RatioAndObjectiveBoundAreHonouredInEachDirection) {
  DivergenceRule rule;
  rule.loss_above_first = 0.95;  // "fell by less than 5%"
  EXPECT_NE(reason(rule, true, 0.5, {2.30, 2.25}), "");
  EXPECT_EQ(reason(rule, true, 0.5, {2.30, 2.0}), "");
  rule.loss_above_first = 2.0;
  EXPECT_EQ(reason(rule, true, 0.5, {1.0, 1.9}), "");
  EXPECT_EQ(reason(rule, true, 0.5, {1.0, 2.1}), "train:loss ended at 2.1, above 2 x its start 1");
  rule.objective_worse_than = 0.15;
  EXPECT_EQ(reason(rule, true, 0.1, {}), "test:acc 0.1 is worse than diverged_if.objective_worse_than 0.15");
  EXPECT_EQ(reason(rule, true, 0.2, {}), "");
  EXPECT_NE(reason(rule, false, 0.2, {}), "");  // minimised: above the bound is worse
  EXPECT_EQ(reason(rule, false, 0.1, {}), "");
}

TEST(Divergence, TheLossMetricDefaultsToTrainLossThenAMinimisedObjective) {
  DivergenceRule rule;
  EXPECT_EQ(resolve_loss_metric(rule, {"train:loss", "test:acc"}, "test:acc", true), "train:loss");
  EXPECT_EQ(resolve_loss_metric(rule, {"loss"}, "loss", false), "loss");
  EXPECT_EQ(resolve_loss_metric(rule, {"acc"}, "acc", true), "");
  rule.loss_metric = "none";
  EXPECT_EQ(resolve_loss_metric(rule, {"train:loss"}, "test:acc", true), "");
  rule.loss_metric = "val";
  EXPECT_EQ(resolve_loss_metric(rule, {"train:loss", "val"}, "test:acc", true), "val");
}

// A learning-rate-like problem: larger x is better up to a cliff at x = 0.6, where training
// diverges; y matters a little. The best trials lie just below the cliff, so a search that
// does not learn where the cliff is keeps suggesting beyond it.
constexpr double kCliff = 0.6;
double objective(const Config& c) {
  const double x = std::get<double>(c.at("x")), y = std::get<double>(c.at("y"));
  return -x + 0.3 * (y - 0.5) * (y - 0.5);
}
bool diverges(const Config& c) { return std::get<double>(c.at("x")) > kCliff; }

// Diverged suggestions among the model's (after the initial design), over `trials`.
int diverged_model_suggestions(uint64_t seed, bool as_failures, int trials) {
  SearchSpace space;
  space.add_continuous("x", 0.0, 1.0, Scaling::kLinear);
  space.add_continuous("y", 0.0, 1.0, Scaling::kLinear);
  BayesianOptions options;
  options.initial_points = 4;
  options.candidates = 500;
  BayesianSearch search(space, seed, options);
  int diverged = 0;
  for (int i = 0; i < trials; ++i) {
    const Config c = *search.suggest();
    if (!diverges(c)) {
      search.observe(c, objective(c));
      continue;
    }
    if (i >= options.initial_points) ++diverged;
    if (as_failures) search.observe_failure(c);
    else search.forget(c);
  }
  if (as_failures) {
    EXPECT_GT(search.failures(), 0) << "seed " << seed << ": nothing diverged";
  }
  return diverged;
}

TEST(Divergence, BayesianSuggestionsLeaveTheRegionOfDivergedTrials) {
  int forgotten = 0, failed = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const int f = diverged_model_suggestions(seed, /*as_failures=*/true, 16);
    forgotten += diverged_model_suggestions(seed, /*as_failures=*/false, 16);
    failed += f;
    // 12 model suggestions: a couple may probe the cliff's edge, no more.
    EXPECT_LE(f, 3) << "seed " << seed;
  }
  // Forgetting them leaves the model blind to the cliff: it walks back over it.
  EXPECT_GE(forgotten, 3 * std::max(failed, 1)) << "failed " << failed << ", forgotten " << forgotten;
}

TEST(Divergence, AFailureIsWorseThanEveryObservation) {
  SearchSpace space;
  space.add_continuous("x", 0.0, 1.0, Scaling::kLinear);
  BayesianSearch search(space, 1);
  EXPECT_EQ(search.failure_value(), 1.0);  // nothing observed yet
  search.observe({{"x", 0.1}}, -2.0);
  search.observe({{"x", 0.2}}, 4.0);
  EXPECT_DOUBLE_EQ(search.failure_value(), 4.0 + 0.5 * 6.0);
  search.observe_failure({{"x", 0.9}});
  EXPECT_EQ(search.failures(), 1);
  EXPECT_EQ(search.observations(), 2);
}

TEST(Divergence, AFailureOnlyStartAvoidsTheFailedPoint) {
  // Nothing observed, one failure at x = 1: the next suggestion is chosen away from it.
  SearchSpace space;
  space.add_continuous("x", 0.0, 1.0, Scaling::kLinear);
  BayesianOptions options;
  options.initial_points = 1;
  BayesianSearch search(space, 7, options);
  const Config first = *search.suggest();
  search.observe_failure({{"x", 1.0}});
  search.forget(first);
  const Config next = *search.suggest();
  EXPECT_LT(std::get<double>(next.at("x")), 0.5);
}

TEST(Divergence, HyperbandCountsADivergedTrialsScoresAsWorseThanAny) {
  // Trial a reaches rung 1 (one value) with a very good score; b comes next with 0.5. At
  // rung 1 with one earlier score, the best ceil(2 / 3) = 1 goes on: a's 0.1 stops b ...
  Hyperband kept(1, 9, 3);
  EXPECT_FALSE(kept.should_stop("a", {0.1}));
  EXPECT_TRUE(kept.should_stop("b", {0.5}));
  // ... unless a diverged: its 0.1 no longer counts, and b goes on.
  Hyperband failed(1, 9, 3);
  EXPECT_FALSE(failed.should_stop("a", {0.1}));
  failed.mark_failed("a");
  EXPECT_FALSE(failed.should_stop("b", {0.5}));
}

}  // namespace
}  // namespace heft::tune
