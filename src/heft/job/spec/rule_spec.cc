#include "heft/job/spec/rule_spec.h"

#include "heft/error.h"

namespace heft::job {

const std::vector<RuleInfo>& rule_catalogue() {
  static const std::vector<RuleInfo> rules = {
      {"CPUBottleneck",
       "the workers' CPUs are busy while steps wait on data loading",
       {{"cpu_threshold", 90, "a worker's CPU use (% of the cores it may use) counted as busy"},
        {"data_threshold", 50, "% of a step's time in data loading that counts as waiting"},
        {"threshold", 50, "% of steps that must be bottlenecked for the rule to fire"},
        {"patience", 20, "steps per rank seen before the rule is evaluated"}}},
      {"LoadBalancing",
       "workers' step time without communication (or CPU use) differ beyond a ratio",
       {{"threshold", 0.5, "(slowest - fastest) / slowest of the ranks' mean busy step time"},
        {"patience", 10, "steps per rank seen before the rule is evaluated"}}},
      {"LowUtilization",
       "the workers' cores are mostly idle",
       {{"threshold_p95", 70, "fires when the 95th percentile of the workers' CPU use "
                              "(% of the cores they may use) is below this"},
        {"window", 30, "system samples the percentile is taken over"},
        {"patience", 10, "system samples seen before the rule is evaluated"}}},
      {"StepOutlier",
       "steps much slower than the others (median + stddev x sigma)",
       {{"stddev", 3, "how many standard deviations above the median a step must be"},
        {"min_ratio", 3, "and at least this many times the median (scheduling noise on a "
                         "busy machine makes a few 2x steps with a small sigma)"},
        {"n_outliers", 10, "outlier steps a rank needs for the rule to fire"},
        {"patience", 20, "steps per rank seen before the rule is evaluated"}}},
      {"StalledTrainingRule",
       "no new step or metric for a while",
       {{"threshold", 1800, "seconds without a new step record or metric point"}}},
      {"LossNotDecreasing",
       "the loss stopped going down",
       {{"metric", "train:loss", "the metric watched (rank 0's series)"},
        {"num_steps", 10, "points between the two values compared"},
        {"diff_percent", 0.1, "the least decrease, in % of the earlier value"},
        {"patience", 1, "consecutive comparisons that must fail"}}},
      {"Overfit",
       "the validation metric drifts away from the training metric",
       {{"training_metric", "train:loss", "the training series"},
        {"validation_metric", "test:loss", "the validation series"},
        {"ratio_threshold", 0.1, "(validation - training) / training above which a point counts"},
        {"patience", 1, "consecutive validation points over the ratio"}}},
      {"IOBottleneck",
       "steps wait on data while the workers' CPUs are mostly idle: the data comes from a "
       "slow disk or network, not from computation",
       {{"io_threshold", 50, "% of a step's time in data loading that counts as waiting"},
        {"cpu_threshold", 50, "a worker's CPU use (% of the cores it may use) below which "
                              "the wait is not computation"},
        {"threshold", 50, "% of steps that must be waiting for the rule to fire"},
        {"patience", 20, "steps per rank seen before the rule is evaluated"}}},
      {"BatchSize",
       "the workers use little of their cores and of their memory: a larger batch would fit "
       "and use them",
       {{"cpu_threshold_p95", 70, "the 95th percentile of a worker's CPU use (% of the cores "
                                  "it may use) below which it counts as underused"},
        {"memory_threshold_p95", 20, "the 95th percentile of a worker's RSS, in % of its share "
                                     "of the host's memory, below which it counts as small"},
        {"window", 30, "system samples the percentiles are taken over"},
        {"patience", 10, "system samples seen before the rule is evaluated"}}},
      {"MaxInitializationTime",
       "the first step comes long after the start (data download, model build, rendezvous)",
       {{"threshold_s", 1200, "seconds from the group's start to the first step record"}}},
      {"OverallSystemUsage",
       "the hosts' cores are saturated and a large part of the load is not the workers'",
       {{"threshold_p95", 90, "the 95th percentile of the host's busy cores (% of all) at "
                              "which it counts as saturated"},
        {"other_threshold", 25, "% of the host's cores busy with other processes (the median) "
                                "for the rule to fire"},
        {"window", 30, "system samples the percentiles are taken over"},
        {"patience", 10, "system samples seen before the rule is evaluated"}}},
      {"Dataloader",
       "too few data-loader processes for a step that waits on data, or more than the cores "
       "can run",
       {{"min_threshold", 70, "loader processes below this % of a worker's cores count as "
                              "too few when steps wait on data"},
        {"max_threshold", 200, "loader processes above this % of a worker's cores count as "
                               "too many"},
        {"data_threshold", 25, "the median % of a step's time in data loading that counts "
                               "as waiting"},
        {"patience", 10, "system samples and steps per rank seen before the rule is "
                         "evaluated"}}},
  };
  return rules;
}

const RuleInfo* find_rule(const std::string& name) {
  for (const RuleInfo& r : rule_catalogue())
    if (r.name == name) return &r;
  return nullptr;
}

double RuleSpec::number(const std::string& parameter) const {
  auto it = parameters.find(parameter);
  if (it == parameters.end() || !it->second.is_number())
    throw InvalidArgument("rule " + rule + ": no numeric parameter " + parameter);
  return it->second.get<double>();
}

std::string RuleSpec::text(const std::string& parameter) const {
  auto it = parameters.find(parameter);
  if (it == parameters.end() || !it->second.is_string())
    throw InvalidArgument("rule " + rule + ": no text parameter " + parameter);
  return it->second.get<std::string>();
}

RuleSpec rule_with_defaults(const RuleInfo& rule) {
  RuleSpec r;
  r.rule = rule.name;
  for (const RuleParameter& p : rule.parameters) r.parameters[p.name] = p.default_value;
  return r;
}

std::vector<RuleSpec> default_rules() {
  std::vector<RuleSpec> rules;
  for (const char* name :
       {"CPUBottleneck", "LoadBalancing", "LowUtilization", "StepOutlier", "StalledTrainingRule"})
    rules.push_back(rule_with_defaults(*find_rule(name)));
  return rules;
}

}  // namespace heft::job
