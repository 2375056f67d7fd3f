// The median stopping rule (src/heft/tune/early_stopping.h): stops a trial clearly worse than
// the earlier ones at the same point, never one that is better, and waits for enough earlier
// trials and points.
#include "heft/tune/early_stopping.h"

#include <gtest/gtest.h>

namespace heft::tune {
namespace {

const std::vector<std::vector<double>> kEarlier = {
    {1.0, 0.8, 0.6, 0.5}, {1.2, 0.9, 0.7, 0.6}, {0.9, 0.7, 0.5, 0.4}, {1.1, 1.0, 0.9, 0.8}};

TEST(MedianStop, StopsATrialClearlyWorseThanTheMedianAtTheSamePoint) {
  std::string why;
  // Running bests at t = 2 of the earlier trials: 0.8, 0.9, 0.7, 1.0 -> median 0.85.
  EXPECT_TRUE(median_stop({2.0, 1.9}, kEarlier, {}, &why));
  EXPECT_NE(why.find("median 0.85 of 4 earlier trials"), std::string::npos) << why;
}

TEST(MedianStop, NeverStopsABetterTrial) {
  EXPECT_FALSE(median_stop({0.9, 0.75}, kEarlier));     // 0.75 < 0.85
  EXPECT_FALSE(median_stop({0.9, 0.85}, kEarlier));     // equal to the median: kept
  EXPECT_FALSE(median_stop({3.0, 0.1, 2.0}, kEarlier)); // its best so far counts
}

TEST(MedianStop, WaitsForEnoughEarlierTrialsAndPoints) {
  EXPECT_FALSE(median_stop({5.0}, kEarlier));  // one point: min_points 2
  EXPECT_FALSE(median_stop({5.0, 5.0}, {kEarlier[0], kEarlier[1]}));  // two earlier trials
  // Earlier trials shorter than the running one do not count at its point.
  EXPECT_FALSE(median_stop({5.0, 5.0, 5.0, 5.0, 5.0}, kEarlier));
  EXPECT_TRUE(median_stop({5.0, 5.0}, {kEarlier[0], kEarlier[1]}, MedianRule{2, 2}));
}

}  // namespace
}  // namespace heft::tune
