// The profiler rules (the catalogue and defaults: job/spec/rule_spec.h; docs/observability.md):
// pure functions of what was observed (resource_rules.cc holds the
// resource rules and the statistics they share, rules_detail.h), so each is tested on synthetic series. A rule returns
// its findings; the job profiler records each (rule, rank) once and stops the job when the
// rule's action says so.
//
//   CPUBottleneck        steps waiting on data while the worker's CPU is busy
//   LoadBalancing        ranks' mean busy step time (less communication) differ
//   LowUtilization       the workers' CPU use mostly low
//   StepOutlier          steps slower than median + stddev x sigma, per rank
//   StalledTrainingRule  no step or metric for `threshold` seconds
//   LossNotDecreasing    the metric did not drop by diff_percent over num_steps points
//   Overfit              validation above training by more than ratio_threshold
//   IOBottleneck         steps waiting on data while the worker's CPU is idle
//   BatchSize            the workers' CPU and memory use both low
//   MaxInitializationTime  the first step long after the start
//   OverallSystemUsage   the host's cores saturated, much of it by other processes
//   Dataloader           too few loader processes for steps that wait on data, or too many
//
// Deliberately left out: GPU rules, framework-specific rules (tensor statistics).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/job/spec/rule_spec.h"
#include "heft/profile/observations.h"

namespace heft::profile {

struct RuleFinding {
  std::string rule;
  int rank = -1;  // -1: about the job as a whole
  std::string message;
  nlohmann::json evidence = nlohmann::json::object();
  std::string recommendation;
};

// Evaluates one rule; throws heft::InvalidArgument for a rule name outside the catalogue.
std::vector<RuleFinding> evaluate_rule(const job::RuleSpec& rule, const Observations& obs);

// What to do about a rule's finding, one sentence (the report's recommendations).
std::string recommendation(const std::string& rule);

}  // namespace heft::profile
