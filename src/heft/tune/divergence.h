// Which tuning trials diverged (`diverged_if` in a tuning spec, docs/tuning.md). A diverged
// trial ends with status Diverged and is a failure to the search: the strategy learns to
// avoid its region (SearchStrategy::observe_failure), the median rule and Hyperband count it as
// worse than any trial, and it is never the best trial.
//
// The rule, checked when a trial ends (and, for a non-finite loss, while it runs):
//   - its objective is non-finite (NaN or infinite), or
//   - a value of the loss metric is non-finite, or
//   - the loss metric *ended above its start*: with n >= 2 values and k = max(1, n / 4),
//     the median of its last k values is above `loss_above_first` (default 1) times the
//     median of its first k. Medians of quarters, not single values, because a logged
//     loss is one mini-batch's (a last, partial batch can read far above the trend), or
//   - `objective_worse_than` is set and the objective is worse than it (below it for
//     Maximize, above for Minimize): for a bound the user knows, such as chance accuracy.
// A network that collapses to chance after a first spike (the loss leaps, then sits at
// log(classes)) ends *below* its start, so only the objective bound catches it: no rule on
// the loss alone tells it from a slow learner without knowing the chance-level loss.
// The loss metric: `loss_metric` as written; by default train:loss when the training job
// defines it (heft-train does), else the objective itself when it is minimised, else none
// (only the objective rules apply). "none" turns the loss rules off.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace heft::job {
class JobDb;
}

namespace heft::tune {

struct DivergenceRule {
  std::string loss_metric;        // as written; "" default, "none" off (see resolve_loss_metric)
  double loss_above_first = 1.0;  // > 0
  std::optional<double> objective_worse_than;
};

// The loss metric the rule reads: `rule.loss_metric` unless empty; else train:loss when it
// is among `defined`, else `objective` when `maximize` is false; "" for none.
std::string resolve_loss_metric(const DivergenceRule& rule, const std::vector<std::string>& defined,
                                const std::string& objective, bool maximize);

// Why the trial diverged ("" when it did not), from its objective as recorded (nullopt:
// none recorded; a NaN stays NaN) and its loss metric's values in order, non-finite ones
// included. `maximize` is the objective's direction; names are for the reason's text.
std::string divergence_reason(const DivergenceRule& rule, bool maximize,
                              const std::string& objective_name, std::optional<double> objective,
                              const std::string& loss_name, const std::vector<double>& loss);

// The values of `metric` that job `job` recorded, in order, from its lowest reporting rank,
// non-finite ones included; empty when there is no such job or metric.
std::vector<double> metric_values(job::JobDb& db, const std::string& job, const std::string& metric);

}  // namespace heft::tune
