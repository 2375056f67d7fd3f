// Hyperband's successive halving (src/heft/tune/hyperband.h): the rungs, and on synthetic
// learning curves it stops the trials outside the best 1/eta at each rung and lets the best
// ones run to the end.
#include "heft/tune/hyperband.h"

#include <gtest/gtest.h>

#include "heft/error.h"

namespace heft::tune {
namespace {

// A curve falling to `final` over 9 reports: final + (9 - t) / 9 at report t.
std::vector<double> curve(double final, int reports) {
  std::vector<double> s;
  for (int t = 1; t <= reports; ++t) s.push_back(final + (9.0 - t) / 9.0);
  return s;
}

TEST(Hyperband, RungsGrowByTheReductionFactor) {
  EXPECT_EQ(Hyperband(1, 9, 3).rungs(), (std::vector<int>{1, 3, 9}));
  EXPECT_EQ(Hyperband(2, 20, 2).rungs(), (std::vector<int>{2, 4, 8, 16}));
  EXPECT_THROW(Hyperband(0, 9, 3), InvalidArgument);
  EXPECT_THROW(Hyperband(1, 9, 1), InvalidArgument);
}

TEST(Hyperband, PromotesTheBestAndStopsTheRestOnSyntheticCurves) {
  Hyperband hb(1, 9, 3);
  // Trials arrive one after another, each reporting its whole curve as it runs.
  const std::vector<double> finals = {0.5, 0.9, 0.2, 0.8, 0.7, 0.1, 0.95, 0.6, 0.05};
  std::vector<int> stopped_at(finals.size(), 0);
  for (size_t i = 0; i < finals.size(); ++i) {
    const std::string name = "t" + std::to_string(i);
    for (int t = 1; t <= 9; ++t) {
      std::string why;
      if (hb.should_stop(name, curve(finals[i], t), &why)) {
        stopped_at[i] = t;
        EXPECT_NE(why.find("outside the best 1/3"), std::string::npos) << why;
        break;
      }
    }
  }
  // The first trial runs through (nothing to compare with); each new best runs to the end.
  EXPECT_EQ(stopped_at[0], 0);
  EXPECT_EQ(stopped_at[2], 0);  // 0.2: best so far
  EXPECT_EQ(stopped_at[5], 0);  // 0.1
  EXPECT_EQ(stopped_at[8], 0);  // 0.05
  // Worse than the earlier ones: stopped at the first rung.
  EXPECT_EQ(stopped_at[1], 1);  // 0.9 after 0.5
  EXPECT_EQ(stopped_at[6], 1);  // 0.95
  int stopped = 0;
  for (int s : stopped_at) stopped += s > 0;
  EXPECT_GE(stopped, 4);
}

}  // namespace
}  // namespace heft::tune
