// The profiler rules a job spec may name (`rules: [{rule, parameters, action}]`), each with
// its parameters and their defaults: the catalogue that the spec validation checks against
// and the rules (profile/rules.h) read their settings from. docs/observability.md lists them.
//
// Deliberately left out: evaluating rules (profile/rules.h).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heft::job {

struct RuleParameter {
  std::string name;
  nlohmann::json default_value;  // a number, or a string (metric names)
  std::string meaning;
};

struct RuleInfo {
  std::string name;  // CPUBottleneck, LoadBalancing, ...
  std::string what;  // one line
  std::vector<RuleParameter> parameters;
};

// Every rule, in the order docs/observability.md lists them.
const std::vector<RuleInfo>& rule_catalogue();
// The rule named `name`, or nullptr.
const RuleInfo* find_rule(const std::string& name);

// A rule's notify action: each new finding of the rule, as JSON, goes to a command's stdin
// (`exec`) and/or in an HTTP POST (`url`, http:// only), each within timeout_s. A failed
// notification is logged and never stops or fails the job.
struct NotifyAction {
  std::vector<std::string> exec;  // argv; empty: none
  std::string url;                // empty: none
  double timeout_s = 10;
  bool any() const { return !exec.empty() || !url.empty(); }
};

struct RuleSpec {
  std::string rule;
  // Every parameter of the rule: the spec's values over the defaults.
  std::map<std::string, nlohmann::json> parameters;
  bool stop = false;  // action: stop (else none: record the finding only)
  NotifyAction notify;

  double number(const std::string& parameter) const;
  std::string text(const std::string& parameter) const;
};

// The rules a job gets when its spec has no `rules` field: the system and step rules with
// action none (an empty list turns them all off).
std::vector<RuleSpec> default_rules();
// `rule` with every parameter at its default.
RuleSpec rule_with_defaults(const RuleInfo& rule);

struct ProfilerSpec {
  // System sampling, step timings and collective traces (false: none; rules on metrics
  // alone still run).
  bool enabled = true;
  double interval_s = 1.0;  // between system samples and rule evaluations
};

}  // namespace heft::job
