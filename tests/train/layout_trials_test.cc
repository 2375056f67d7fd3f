// ctest-labels: unit
// Which layouts the layout trials run (train/layout_trials.h: trial_candidates): the first K of
// the ranked list, only those predicted within kTrialWithin x the first, none when that leaves
// fewer than two; and the short names the trial lines print.
#include <gtest/gtest.h>

#include "heft/train/layout_trials.h"

namespace heft::train {
namespace {

using parallel::layout::Prediction;
using parallel::layout::SearchResult;

SearchResult ranked(const std::vector<double>& step_s) {
  SearchResult r;
  for (size_t i = 0; i < step_s.size(); ++i) {
    Prediction p;
    p.step_s = step_s[i];
    p.layout.data = static_cast<int>(i) + 1;  // tells them apart
    r.ranked.push_back(p);
  }
  return r;
}

std::vector<double> steps(const std::vector<Prediction>& ps) {
  std::vector<double> out;
  for (const Prediction& p : ps) out.push_back(p.step_s);
  return out;
}

TEST(LayoutTrials, TheFirstKWithinTheFactorOfTheFirst) {
  const SearchResult r = ranked({1.0, 1.1, 1.2, 1.25, 1.29, 1.31, 1.4});
  EXPECT_EQ(steps(trial_candidates(r, 3)), (std::vector<double>{1.0, 1.1, 1.2}));
  // K beyond the factor: cut at the first layout predicted above 1.3x.
  EXPECT_EQ(steps(trial_candidates(r, 16)), (std::vector<double>{1.0, 1.1, 1.2, 1.25, 1.29}));
  EXPECT_EQ(trial_candidates(r, 3).front().layout.data, 1);  // the prediction's first is trial 1
}

TEST(LayoutTrials, FewerThanTwoIsNone) {
  EXPECT_TRUE(trial_candidates(ranked({1.0, 1.1, 1.2}), 0).empty());
  EXPECT_TRUE(trial_candidates(ranked({1.0, 1.1, 1.2}), 1).empty());
  EXPECT_TRUE(trial_candidates(ranked({1.0, 1.5, 1.6}), 3).empty());  // only the first is near
  EXPECT_TRUE(trial_candidates(ranked({1.0}), 3).empty());
  EXPECT_TRUE(trial_candidates(SearchResult{}, 3).empty());
  EXPECT_EQ(trial_candidates(ranked({1.0, 1.3}), 2).size(), 2u);  // the bound itself is in
}

TEST(LayoutTrials, NoTrialOfALayoutPredictedNearTheMemoryLimitButTheFirst) {
  SearchResult r = ranked({1.0, 1.1, 1.2, 1.25});
  const int64_t limit = 1000;
  r.ranked[0].memory_bytes = 990;  // the search's first: it trains whatever the trials do
  r.ranked[1].memory_bytes = 940;  // over 0.93 x the limit: a trial's residue could pass it
  r.ranked[2].memory_bytes = 930;
  r.ranked[3].memory_bytes = 500;
  EXPECT_EQ(steps(trial_candidates(r, 3, limit)), (std::vector<double>{1.0, 1.2, 1.25}));
  EXPECT_EQ(steps(trial_candidates(r, 3)), (std::vector<double>{1.0, 1.1, 1.2}));  // no limit
  r.ranked[2].memory_bytes = r.ranked[3].memory_bytes = 999;
  EXPECT_TRUE(trial_candidates(r, 3, limit).empty());  // only the first is left
}

TEST(LayoutTrials, ShortNames) {
  parallel::layout::Layout l;
  l.sharded = 2;
  l.pipeline = 2;
  l.microbatches = 4;
  l.virtual_stages = 2;
  EXPECT_EQ(short_name(l), "d1 s2 t1 p2 m4 v2");
  l.checkpointing = true;
  EXPECT_EQ(short_name(l), "d1 s2 t1 p2 m4 v2 ckpt");
}

}  // namespace
}  // namespace heft::train
