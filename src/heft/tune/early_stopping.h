// Early stopping of tuning trials (`early_stopping: Auto`): the median stopping rule. A
// running trial is stopped when its best objective so far, after t reported values, is worse
// than the median of the best-so-far after t values of the earlier trials that reported at
// least t. Objectives here are minimised (the tuner negates a Maximize objective).
//
// Terms. *Series*: the objective values a trial reported, in order (its metric points of the
// lowest rank). *Running best at t*: the minimum of the first t values.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace heft::tune {

struct MedianRule {
  int min_trials = 3;  // earlier trials that reached t needed before any stop
  int min_points = 2;  // values a trial reports before it can be stopped
};

// Whether `running` should stop, judged against `earlier` (series of ended trials). When it
// should, `why` (if given) explains with numbers.
bool median_stop(const std::vector<double>& running, const std::vector<std::vector<double>>& earlier,
                 const MedianRule& rule = {}, std::string* why = nullptr);

}  // namespace heft::tune
