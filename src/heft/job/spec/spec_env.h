// What a training job adds to the launcher's worker environment (docs/jobs.md lists it):
// the cloud training container's job variables (SM_HPS, SM_HP_<NAME>, SM_CHANNELS,
// SM_CHANNEL_<NAME>, SM_MODEL_DIR, SM_OUTPUT_DIR, SM_OUTPUT_DATA_DIR, SM_CHECKPOINT_DIR,
// SM_USER_ARGS, TRAINING_JOB_NAME) and heft's (HEFT_JOB, HEFT_DISTRIBUTION,
// HEFT_CHECKPOINT), plus the spec's own `environment`; and the worker command with the
// hyperparameters appended as `--name value`. Pure functions of the spec and the job's
// directories, so they are unit-tested without processes.
//
// Deliberately left out: the per-rank variables (worker_env.h builds those).
#pragma once

#include <string>
#include <vector>

#include "heft/job/paths.h"
#include "heft/result.h"
#include "heft/job/spec/spec.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

// The variables above, for every worker of the job.
Environment training_environment(const JobSpec& spec, const JobPaths& paths);

// "--name value" for each hyperparameter, sorted by name, values as written in the spec.
std::vector<std::string> hyperparameter_args(const JobSpec& spec);

// The command every worker runs: the entry point, with `heft-train` resolved to the
// executable of that name in `heft_dir` (the directory of the running heft binary), then
// hyperparameter_args(). An error when heft-train is not there.
Result<std::vector<std::string>> worker_command(const JobSpec& spec, const std::string& heft_dir);

}  // namespace heft::job
