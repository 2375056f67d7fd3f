// The spec's monitoring blocks, read and validated as spec.cc reads the others (each problem
// one message naming the field, through the SpecReader): `metric_definitions` (the regexes
// the supervisor applies to the workers' output; RE2, with a group around the number),
// `rules` (the profiler's rules, rule_spec.h, with their parameters and action) and
// `profiler` (system sampling). Internal to job/spec: parse_spec (spec.h) calls them.
#pragma once

#include <yaml-cpp/yaml.h>

#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::job {

// The spec's own definitions (at most 40, names unique); with the built-in trainer
// (spec.entry_point read before) followed by builtin_metric_definitions() whose names the
// spec does not define.
void read_metric_definitions(SpecReader& r, const YAML::Node& n, JobSpec& spec);
// The rules (absent: spec.rules stays default_rules()); each of rule_catalogue(), its
// parameters over its defaults, action stop or none.
void read_rules(SpecReader& r, const YAML::Node& n, JobSpec& spec);
// profiler: {enabled, interval_s}.
void read_profiler(SpecReader& r, const YAML::Node& n, JobSpec& spec);

}  // namespace heft::job
