// A tuning job's spec (YAML; docs/tuning.md): which training job to run, which of its
// hyperparameters to search over which ranges, with which strategy, how many trials in all
// and at once, and the objective (one of the training job's metric definitions) to
// maximise or minimise. Validated as job specs are: every problem is reported at once, each
// naming its field, what was expected and what was found; unknown keys get a suggestion.
//
// Deliberately left out: Hyperband's brackets (one bracket of asynchronous successive
// halving stops trials; hyperband.h).
#pragma once

#include <string>
#include <vector>

#include "heft/result.h"
#include "heft/job/spec/spec.h"
#include "heft/tune/divergence.h"
#include "heft/tune/search_space.h"

namespace heft::tune {

struct TuningSpec {
  // The spec's `name`, or, when it gives `base_name` instead, base_name-<UTC time> made when
  // the spec is read (job::timestamped_name), so that each run of a spec has its own name.
  std::string name;
  std::string base_name;  // empty unless the spec gave one (then in tuning.json too)
  std::string objective_metric;  // one of the training job's metric_definitions
  bool maximize = false;         // objective type Maximize (else Minimize)
  std::string strategy = "Bayesian";  // Grid, Random, Bayesian or Hyperband
  // Hyperband's resource, in objective values reported (hyperband.h).
  int hyperband_min_resource = 1, hyperband_max_resource = 9, hyperband_reduction_factor = 3;
  int max_jobs = 10;
  int max_parallel_jobs = 1;  // <= max_jobs
  uint64_t random_seed = 0;
  // early_stopping: Auto stops trials by the median rule (early_stopping.h); Off (default).
  bool early_stopping = false;
  // warm_start: {parents: [tuning jobs], type: IdenticalDataAndAlgorithm}: the parents'
  // trials seed the strategy (checked against the home when the tuning starts).
  std::vector<std::string> warm_start_parents;
  SearchSpace ranges;
  // diverged_if: {loss_metric, loss_above_first, objective_worse_than} (divergence.h).
  DivergenceRule diverged_if;
  // The training job: a spec file (training_job.template, relative to the tuning spec's
  // folder) or the inline spec written out as YAML; trials override its hyperparameters.
  std::string training_job_yaml;
  std::string training_job_source;  // the template's path, or "<spec>: training_job"
  std::string template_path;        // the template's path; empty for an inline job
  job::JobSpec training_job;        // validated (name: the first trial's)
};

// Parses `text` (read from `source`, for messages; relative template paths resolve against
// `base_dir`). `overrides` are `--set key.path=value` lines applied first.
heft::Result<TuningSpec> parse_tuning_spec(const std::string& text, const std::string& source,
                                          const std::string& base_dir,
                                          const std::vector<std::string>& overrides = {});
heft::Result<TuningSpec> load_tuning_spec(const std::string& path,
                                         const std::vector<std::string>& overrides = {});

}  // namespace heft::tune
