// The environment a launcher gives each worker process: torchrun's variables (so a PyTorch
// script with init_method="env://" runs unchanged), the cloud training container's host
// variables, heft's own (store address, job token, timeout, host name), and for a training
// job the training toolkit's per-host contract (SM_TRAINING_ENV, SM_RESOURCE_CONFIG, ...,
// add_training_toolkit_environment). Pure functions of the job's layout and the parent
// environment, so they are unit-tested without processes. The variables and their meaning
// are listed in docs/run.md and docs/jobs.md.
//
// Deliberately left out: the job-spec variables (SM_HPS, SM_CHANNEL_*, HEFT_JOB,
// HEFT_DISTRIBUTION); `heft train` adds them through `extra` (job/spec/spec_env.h).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/contract/worker.h"
#include "heft/result.h"

namespace heft::job {

// Variable name -> value. Ordered, so a built environment prints and compares stably.
using Environment = contract::Environment;

// The network interface that holds IPv4 `address` on this machine ("eth0"), or "" when none
// does.
std::string interface_holding(const std::string& address);

// What is the same for every worker of one job.
struct JobEnvironment {
  // Simulated hosts (algo-1..algo-H) and processes on each. Both >= 1.
  int hosts = 1;
  int processes_per_host = 1;
  // torch's env:// rendezvous: rank 0 starts its own TCPStore at MASTER_ADDR:MASTER_PORT,
  // so the port must be free and differ from heft's store port.
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  // heft's store, as "host:port" (HEFT_STORE), and the job token (HEFT_TOKEN).
  std::string store_address;
  std::string token;
  // Communication timeout in seconds handed to workers (HEFT_TIMEOUT). >= 1.
  int timeout_s = contract::kDefaultTimeoutS;
  // How often the group was started again (TORCHELASTIC_RESTART_COUNT). >= 0.
  int restart_count = 0;
  // Cores of this machine (SM_NUM_CPUS; OMP_NUM_THREADS is derived from it). >= 1.
  int num_cpus = 1;
  // GPUs this host gives its workers (host::visible_gpus; SM_NUM_GPUS).
  int num_gpus = 0;
  // A directory put first on every worker's PYTHONPATH, before what the parent (or `extra`)
  // has there: where heft's Python package is, so `import heft.torch` works in workers
  // without set-up. Empty: PYTHONPATH as the parent and `extra` have it.
  std::string python_path;
  // Set in every worker after everything else; overrides any variable above (but
  // python_path still leads PYTHONPATH).
  Environment extra;
};

// The simulated host name of host index h (0-based): "algo-<h+1>".
std::string host_name(int host_index);

// The environment of global rank `rank` (0 <= rank < hosts * processes_per_host): `parent`
// with the variables above set or replaced, then `job.extra`. Ranks are host-major: host h
// runs ranks h*P .. h*P+P-1. OMP_NUM_THREADS = max(1, num_cpus / (hosts * processes_per_host)) (the simulated hosts
// share this machine) unless
// `parent` or `extra` sets it. Throws heft::InvalidArgument naming the field on a layout
// outside the ranges above or a rank outside the world.
Environment worker_environment(const JobEnvironment& job, int rank, const Environment& parent);

// The training toolkit's per-host variables, made from those a training job's worker already
// has (SM_HOSTS, SM_CURRENT_HOST, SM_NUM_CPUS, SM_NUM_GPUS from worker_environment; SM_HPS,
// SM_CHANNELS, SM_CHANNEL_<NAME>, SM_INPUT_DATA_CONFIG, SM_FRAMEWORK_PARAMS, SM_MODEL_DIR,
// SM_OUTPUT_*, SM_MODULE_*, SM_USER_ENTRY_POINT, SM_LOG_LEVEL, SM_HP_MP_PARAMETERS,
// TRAINING_JOB_NAME, HEFT_JOB_DIR from training_environment): SM_RESOURCE_CONFIG,
// SM_NETWORK_INTERFACE_NAME, SM_INPUT_DIR and SM_INPUT_CONFIG_DIR (HEFT_JOB_DIR/input/<host>),
// SM_CURRENT_INSTANCE_TYPE (as the environment has it, else "local"), SM_CURRENT_INSTANCE_GROUP, SM_INSTANCE_GROUPS,
// SM_INSTANCE_GROUPS_DICT, SM_CURRENT_INSTANCE_GROUP_HOSTS, SM_DISTRIBUTION_INSTANCE_GROUPS,
// SM_IS_HETERO, and SM_TRAINING_ENV, the toolkit's whole environment as one JSON object
// (docs/jobs.md lists its fields). Values that are not strings are compact JSON with sorted
// keys, as the toolkit writes them. Leaves `env` as it is when it has no SM_HPS (not a
// training job: `heft run`). worker_environment calls it; an engine's worker shim calls it
// on the environment it made.
void add_training_toolkit_environment(Environment& env);

// Writes the training toolkit's input config files for the host of `env` (an environment
// add_training_toolkit_environment completed) into its SM_INPUT_CONFIG_DIR, made if missing:
// resourceconfig.json (SM_RESOURCE_CONFIG), inputdataconfig.json (SM_INPUT_DATA_CONFIG) and
// hyperparameters.json (SM_HPS and SM_FRAMEWORK_PARAMS, each value JSON-encoded into a
// string as the cloud SDK hands hyperparameters to the service), each written to a
// temporary file and renamed, so workers of one host may all call it. Also links
// SM_INPUT_DIR/data/<channel> to each channel's directory. An error names the file; success
// and nothing written when env has no SM_INPUT_CONFIG_DIR.
Status write_host_input_config(const Environment& env);

// resourceconfig.json and SM_RESOURCE_CONFIG: current_host, current_instance_type (the spec's
// cluster.instance_type, default "local"), current_group_name, hosts, instance_groups (one,
// "homogeneousCluster"), network_interface_name.
nlohmann::json resource_config(const std::vector<std::string>& hosts,
                               const std::string& current_host,
                               const std::string& network_interface,
                               const std::string& instance_type = "local");

// SM_NETWORK_INTERFACE_NAME: GLOO_SOCKET_IFNAME when set, else the interface holding
// MASTER_ADDR on this machine ("lo" for the local launcher's 127.0.0.1), else "eth0" (the
// toolkit's default).
std::string network_interface_name(const Environment& env);

// The calling process's environment (environ). Reads a process-wide global: not
// thread-safe against concurrent setenv.
Environment current_environment();

// Cores this process may run on (sched_getaffinity), at least 1.
int available_cpus();
// The GPUs a worker here sees (host::visible_gpus: the NVIDIA driver's, within
// CUDA_VISIBLE_DEVICES); 0 without.
int visible_gpus();

// "NAME=value" strings, the form execve() takes.
std::vector<std::string> to_envp(const Environment& env);

}  // namespace heft::job
