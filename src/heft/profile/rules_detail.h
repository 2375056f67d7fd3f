// What the rules (rules.cc, resource_rules.cc) share: the statistics they take over series
// and the rules of resource_rules.cc, which evaluate_rule (rules.h) dispatches to. Internal
// to profile/.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "heft/job/spec/rule_spec.h"
#include "heft/profile/observations.h"
#include "heft/profile/rules.h"

namespace heft::profile::detail {

std::string fmt(double v, int digits = 1);
std::map<int, std::vector<const StepRecord*>> steps_by_rank(const Observations& obs);
double median(std::vector<double> v);
// The p-th percentile (0-100), interpolated; 0 for none.
double percentile(std::vector<double> v, double p);
// The utilisation of `rank` in the system sample nearest to `t` that holds the rank (a rank
// of another host is in the samples its shim's newest sample reached in time, not in every
// one); -1 when none holds it.
double utilisation_at(const Observations& obs, int rank, double t);
// "rank N", or "rank N on HOST" for a rank sampled on a named host (an engine's group).
std::string rank_text(const Observations& obs, int rank);
// The host `rank` was sampled on ("": this machine, or not sampled).
std::string host_of(const Observations& obs, int rank);
// The last `window` system samples (all when fewer).
std::vector<const SystemSample*> last_samples(const Observations& obs, double window);

std::vector<RuleFinding> io_bottleneck(const job::RuleSpec& r, const Observations& obs);
std::vector<RuleFinding> batch_size(const job::RuleSpec& r, const Observations& obs);
std::vector<RuleFinding> max_initialization_time(const job::RuleSpec& r, const Observations& obs);
std::vector<RuleFinding> overall_system_usage(const job::RuleSpec& r, const Observations& obs);
std::vector<RuleFinding> dataloader(const job::RuleSpec& r, const Observations& obs);

}  // namespace heft::profile::detail
