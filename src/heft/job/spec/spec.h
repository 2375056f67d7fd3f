// The job spec: the YAML a user hands to `heft train` (docs/jobs.md is its reference: every
// field, its default, an example). load_spec() reads and validates it; every problem becomes
// one line of the error, naming where (file:line, or the --set override), the field, what
// was expected and what was found. An unknown key suggests the nearest known one.
//
// Deliberately left out: launching (supervisor.h), the worker environment built from a
// spec (spec_env.h), and launchers other than `local`.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/config/distribution.h"
#include "heft/config/nearest.h"
#include "heft/contract/defaults.h"
#include "heft/result.h"
#include "heft/job/spec/rule_spec.h"

namespace heft::job {

// The entry point that names the built-in trainer.
inline constexpr const char* kBuiltinTrainer = "heft-train";

struct Hyperparameter {
  // As written in the spec ("0.05", "cnn", "true"): what `--name value` and SM_HP_<NAME> get.
  std::string text;
  // Typed (number, bool or string): what SM_HPS holds.
  nlohmann::json value;
};

struct MetricDefinition {
  std::string name;   // "train:loss"
  std::string regex;  // ECMAScript; its first group is the value
};

struct ClusterSpec {
  int instance_count = 1;      // hosts (simulated ones with the local launcher)
  int processes_per_host = 1;  // workers on each
  std::string launcher = "local";  // local | mpirun | slurm
  // What the job says it runs on (the estimator's instance_type): SM_CURRENT_INSTANCE_TYPE and
  // the toolkit's files report it; the workers run where the launcher puts them.
  std::string instance_type = "local";
  // mpirun only (docs/clusters.md): the hosts, by name or address, from `hosts` or read from
  // `hostfile` (instance_count is their number), and options appended to mpirun's.
  std::vector<std::string> hosts;
  std::string hostfile;
  std::string custom_mpi_options;
  std::string srun_options;  // slurm only: appended to srun's own
  // slurm only: appended to sbatch's own when heft train, outside an allocation, submits
  // the workers as a batch job (e.g. "--partition=gpu --time=2:00:00").
  std::string sbatch_options;
  // mpirun and slurm: the address the rendezvous store binds, which every host must reach;
  // empty: this machine's address toward the first host (or, outside a Slurm allocation,
  // toward its own name).
  std::string store_address;
};

struct CheckpointSpec {
  int every_steps = 0;  // 0: the trainer saves only when stopped and at the end
  int keep = 2;         // newest checkpoints kept
};

struct StoppingSpec {
  double max_runtime_s = 86400;  // of the group's running time, over all attempts
  double grace_s = 30;           // between SIGTERM and SIGKILL when stopping the group
  // How long a collective (or the rendezvous) waits for a peer before the ranks give up and
  // name it (HEFT_TIMEOUT); a hung rank ends the job after this long.
  int timeout_s = contract::kDefaultTimeoutS;
  // Once some rank exited 0, how long the others may keep running (rank 0 saving a model)
  // before they are stopped and the job ends Failed naming them.
  double straggler_grace_s = 300;
};

struct RetrySpec {
  int max_attempts = 1;  // starts of a group that keeps failing, 1 = no retry
  // In-place recovery (docs/recovery.md): a rank killed by a signal is restarted alone and
  // the others rejoin it, up to kInPlaceRecoveries times a start; the local launcher only.
  bool in_place = false;
};

// The most ranks one start of a group restarts in place before a loss stops it.
inline constexpr int kInPlaceRecoveries = 8;

struct SpotSpec {
  bool enabled = false;
  // Wall-clock bound on the whole job, interruptions included; 0 in a spec means
  // "as max_runtime_s" and is replaced by it.
  double max_wait_s = 0;
  // Simulated reclaims: interrupt the group every_s seconds after each start, at most count
  // times. count 0 = none.
  double simulate_every_s = 0;
  int simulate_count = 0;
};

struct JobSpec {
  std::string name;       // empty when only base_name was given, until the job is recorded
  std::string base_name;  // the spec's base_name: the job is named base_name-<UTC time>
  // {"heft-train"} for the built-in trainer, else the command and its arguments.
  std::vector<std::string> entry_point;
  std::map<std::string, Hyperparameter> hyperparameters;
  std::map<std::string, std::string> inputs;  // channel -> absolute directory
  ClusterSpec cluster;
  nlohmann::json distribution = nlohmann::json::object();  // as given (heft's or the SDK's)
  // The same in heft's form (config::Distribution::to_json, before heft-train's
  // hyperparameters): HEFT_DISTRIBUTION and `heft train --print-spec`.
  nlohmann::json distribution_normalized = nlohmann::json::object();
  config::Distribution distribution_config;  // typed, checked, hyperparameters resolved
  // The spec's own definitions; for the built-in trainer followed by its defaults whose
  // names the spec does not define.
  std::vector<MetricDefinition> metric_definitions;
  CheckpointSpec checkpoint;
  StoppingSpec stopping;
  RetrySpec retry;
  SpotSpec spot;
  std::map<std::string, std::string> environment;  // extra variables for every worker
  // Profiler rules (rule_spec.h); default_rules() when the spec has no `rules` field.
  std::vector<RuleSpec> rules = default_rules();
  ProfilerSpec profiler;

  bool builtin_trainer() const {
    return entry_point.size() == 1 && entry_point[0] == kBuiltinTrainer;
  }
  int world_size() const { return cluster.instance_count * cluster.processes_per_host; }
};

// A hyperparameter of the training toolkit's own (`sagemaker_` first, as the cloud SDK adds
// them: sagemaker_program, sagemaker_container_log_level, ...): kept out of the script's
// arguments, SM_HPS and SM_HP_*, and given as the toolkit's framework parameters
// (spec_env.h).
inline bool is_framework_parameter(const std::string& name) {
  return name.rfind("sagemaker_", 0) == 0;
}

// A base name (`base_name:` of a job or tuning spec): letters, digits and '-' (not first or
// last), at most kMaxBaseName characters, so that the time suffix, a counter and a trial
// number still fit a job name.
inline constexpr size_t kMaxBaseName = 32;
bool is_base_name(const std::string& s);
// A job name: letters, digits and '-' (not first or last), at most 63 characters.
bool valid_job_name(const std::string& s);

// The built-in trainer's metric lines (train:loss, train:throughput, train:tokens_per_s,
// test:acc, validation:loss).
std::vector<MetricDefinition> builtin_metric_definitions();

// Parses and validates spec text. `source` names it in messages (the file name).
// `overrides` are "key.path=value" strings applied before validation (`--set`): the value
// is read as a YAML scalar or flow collection, maps on the path are created, a number in the
// path indexes a list. Relative input directories are resolved against the current
// directory and must exist. The error holds one line per problem.
Result<JobSpec> parse_spec(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides = {});

// Reads `path` and parses it as above; a file that cannot be read is an error naming it.
Result<JobSpec> load_spec(const std::string& path,
                          const std::vector<std::string>& overrides = {});

// The spec as JSON (every field, defaults filled in): what the job database keeps and
// `heft describe --json` shows under "spec".
nlohmann::json spec_to_json(const JobSpec& spec);

// spec_to_json with the distribution in heft's form (distribution_normalized) and the SDK's
// launch settings in the cluster block: what `heft train --print-spec` prints, itself a
// spec of the same job.
nlohmann::json normalized_spec_json(const JobSpec& spec);

// The spec recorded in the job database (spec_to_json's output), read and validated again
// (`heft resume`): the same spec, or an error naming the field when the machine changed
// under it (an input directory gone). `source` names it in messages ("job 'x'").
Result<JobSpec> spec_from_json(const nlohmann::json& recorded, const std::string& source);

// The spec's "did you mean": config/nearest.h, shared with the distribution block.
using config::edit_distance;
using config::nearest;

}  // namespace heft::job
