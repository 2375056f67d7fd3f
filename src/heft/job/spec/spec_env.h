// What a training job adds to the launcher's worker environment (docs/jobs.md lists it):
// the cloud training toolkit's job variables (SM_HPS, SM_HP_<NAME>, SM_CHANNELS,
// SM_CHANNEL_<NAME>, SM_MODEL_DIR, SM_OUTPUT_DIR, SM_OUTPUT_DATA_DIR,
// SM_OUTPUT_INTERMEDIATE_DIR, SM_CHECKPOINT_DIR, SM_USER_ARGS, SM_INPUT_DATA_CONFIG,
// SM_FRAMEWORK_PARAMS, SM_LOG_LEVEL, SM_MODULE_DIR, SM_MODULE_NAME, SM_USER_ENTRY_POINT,
// SM_HP_MP_PARAMETERS, TRAINING_JOB_NAME) and heft's (HEFT_JOB, HEFT_JOB_DIR,
// HEFT_DISTRIBUTION, HEFT_CHECKPOINT), plus the spec's own `environment`; the worker command
// with the hyperparameters appended as the toolkit passes them; and the toolkit's input
// config files. The per-host part of the contract (SM_TRAINING_ENV, SM_RESOURCE_CONFIG,
// SM_INPUT_CONFIG_DIR, ...) is worker_env.h's add_training_toolkit_environment.
//
// Deliberately left out: the per-rank variables (worker_env.h builds those).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/job/paths.h"
#include "heft/result.h"
#include "heft/job/spec/spec.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

// The variables above, for every worker of the job.
Environment training_environment(const JobSpec& spec, const JobPaths& paths);

// The hyperparameters as the training toolkit passes them to a script, sorted by name:
// `--name value` for every name (the toolkit passes `-n` for a one-letter name; heft keeps
// `--n`, which scripts written for heft read); a boolean as Python prints it (True,
// False), anything else as written in the spec. Framework parameters (sagemaker_*) are left
// out.
std::vector<std::string> hyperparameter_args(const JobSpec& spec);

// The command every worker runs: the entry point, with `heft-train` resolved to the
// executable of that name in `heft_dir` (the directory of the running heft binary), then
// hyperparameter_args(). An error when heft-train is not there.
Result<std::vector<std::string>> worker_command(const JobSpec& spec, const std::string& heft_dir);

// inputdataconfig.json: each channel's {TrainingInputMode: File, S3DistributionType:
// FullyReplicated, RecordWrapperType: None}.
nlohmann::json input_data_config(const JobSpec& spec);

// hyperparameters.json: every hyperparameter and framework parameter (SM_FRAMEWORK_PARAMS:
// the distribution dicts' flags too, as the cloud SDK adds them) with its value JSON-encoded
// into a string, as the SDK hands them to the service ({"epochs": "2", "model":
// "\"cnn\""}); the toolkit decodes each again. What write_host_input_config writes.
nlohmann::json hyperparameters_file(const JobSpec& spec);

// The hosts the job's workers run on, by the names SM_CURRENT_HOST gives them: algo-1 ...
// algo-H for the local launcher, cluster.hosts for mpirun; empty for slurm (known only in
// the allocation).
std::vector<std::string> job_hosts(const JobSpec& spec);

// With the local launcher: the input config files of each of job_hosts()
// (worker_env.h's write_host_input_config on the environment that host's workers get:
// hyperparameters.json, inputdataconfig.json, resourceconfig.json in input_config_dir(host),
// input/<host>/data/<channel> linking each channel). Other launchers' hosts are not this
// machine: nothing is written here (their worker shim writes them). An error names the file.
Status write_input_config(const JobSpec& spec, const JobPaths& paths);

}  // namespace heft::job
