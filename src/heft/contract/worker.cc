#include "heft/contract/worker.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "heft/error.h"

extern char** environ;

namespace heft::contract {

namespace {

constexpr std::string_view kEvery = "every launcher";
constexpr std::string_view kTrain = "heft train";

// The rows, in docs order. `when_unset` is what heft's own readers take (kDefault* above);
// "" where a worker started by heft always has it.
const std::vector<Variable> kWorkerVariables = {
    // torchrun's
    {"RANK", kEvery, "integer >= 0", "", "`3`", "global rank, 0 ... WORLD_SIZE-1", true},
    {"LOCAL_RANK", kEvery, "integer >= 0", "", "`1`", "rank within its host, 0 ... P-1", true},
    {"WORLD_SIZE", kEvery, "integer >= 1", "", "`4`", "hosts x workers per host (H x P)", true},
    {"LOCAL_WORLD_SIZE", kEvery, "integer >= 1", "", "`2`", "workers on its host (P)", true},
    {"GROUP_RANK", kEvery, "integer >= 0", "", "`1`", "index of its host, 0 ... H-1", true},
    {"MASTER_ADDR", kEvery, "address", "", "`127.0.0.1`", "where torch's `env://` rendezvous meets", true},
    {"MASTER_PORT", kEvery, "port", "", "`41237`",
     "a port free when the job starts, never the store's: rank 0 of torch's `env://` starts its "
     "own TCPStore there", true},
    {"TORCHELASTIC_RESTART_COUNT", kEvery, "integer >= 0", "0", "`2`",
     "starts of the group before this one (`heft train`'s interruptions and retries; `heft run` "
     "does not restart)", true},
    {"OMP_NUM_THREADS", kEvery, "integer >= 1", "torch's default", "`1`",
     "max(1, SM_NUM_CPUS / (H x P)): simulated hosts all run on one machine, so every worker "
     "gets its share of the cores; the engines' workers: the host's cores / P; **kept as is when "
     "already set**"},
    {"GLOO_SOCKET_IFNAME", "mpirun, Slurm", "interface name", "torch's choice", "`eth1`",
     "the interface this host reaches heft's store through (not loopback), unless set: Gloo "
     "would pick one from the host name, often loopback on a cluster"},
    {"NCCL_SOCKET_IFNAME", "mpirun, Slurm", "interface name", "NCCL's choice", "`eth1`",
     "as GLOO_SOCKET_IFNAME, for NCCL's socket transport"},
    {"PYTHONPATH", kEvery, "paths", "", "`/src/heft/build/python:/mine`",
     "heft's Python package directory put first (`build/python` in a build tree, "
     "`lib/python3.11/dist-packages` under an installed prefix), so `import heft.torch` works in "
     "every worker; unchanged when heft was built without Python"},
    // the cloud training container's
    {"SM_HOSTS", kEvery, "JSON list", "", "`[\"algo-1\",\"algo-2\"]`", "the hosts", true},
    {"SM_CURRENT_HOST", kEvery, "text", "", "`algo-2`", "this worker's host", true},
    {"SM_NUM_CPUS", kEvery, "integer >= 1", "", "`2`", "cores this machine gives heft (its CPU affinity)", true},
    {"SM_NUM_GPUS", kEvery, "integer >= 0", "", "`0`",
     "the NVIDIA GPUs a worker on this host sees (the driver's devices within CUDA_VISIBLE_DEVICES); 0 without", true},
    {"SM_HPS", kTrain, "JSON object", "", "`{\"epochs\":2,\"lr\":0.05}`", "the hyperparameters, typed", true},
    {"SM_HP_<NAME>", kTrain, "text", "", "`SM_HP_LR=0.05`",
     "each hyperparameter as written; the name upper-cased", true},
    {"SM_USER_ARGS", kTrain, "JSON list", "", "`[\"--epochs\",\"2\"]`",
     "the hyperparameter arguments the entry point is given ([jobs.md](jobs.md#the-environment-a-worker-gets))", true},
    {"SM_CHANNELS", kTrain, "JSON list", "", "`[\"test\",\"train\"]`", "the input channels", true},
    {"SM_CHANNEL_<NAME>", kTrain, "path", "", "`SM_CHANNEL_TRAIN=/data/fashion`",
     "each channel's directory, absolute", true},
    {"SM_INPUT_DATA_CONFIG", kTrain, "JSON object", "", "`{\"train\":{\"TrainingInputMode\":\"File\",...}}`",
     "`inputdataconfig.json`: each channel, read as files", true},
    {"SM_FRAMEWORK_PARAMS", kTrain, "JSON object", "", "`{\"sagemaker_pytorch_ddp_enabled\":true}`",
     "the framework parameters: the distribution dicts' flags and the `sagemaker_...` hyperparameters", true},
    {"SM_LOG_LEVEL", kTrain, "integer", "", "`20`",
     "`sagemaker_container_log_level`, else 20 (Python's INFO)", true},
    {"SM_MODULE_DIR", kTrain, "path", "", "`/home/me/project`",
     "the entry script's directory (the first argument of the entry point naming a file, else "
     "the first `*.py`), or `sagemaker_submit_directory`", true},
    {"SM_USER_ENTRY_POINT", kTrain, "text", "", "`train.py`",
     "the entry script's file name (or `sagemaker_program`)", true},
    {"SM_MODULE_NAME", kTrain, "text", "", "`train`", "SM_USER_ENTRY_POINT without `.py`", true},
    {"SM_FRAMEWORK_MODULE", kTrain, "text", "", "empty", "none", true},
    {"SM_HP_MP_PARAMETERS", kTrain, "JSON object", "absent: no model parallelism",
     "`{\"partitions\":2,\"ddp\":true}`", "with model parallelism: its parameters as the spec gives them", true},
    {"SM_MODEL_DIR", kTrain, "path", "", "`~/.heft/jobs/J/model`", "where the final model goes", true},
    {"SM_OUTPUT_DIR", kTrain, "path", "", "`~/.heft/jobs/J/output`",
     "a `failure` file here becomes the failure reason", true},
    {"SM_OUTPUT_DATA_DIR", kTrain, "path", "", "`~/.heft/jobs/J/output/data`", "other artifacts", true},
    {"SM_OUTPUT_INTERMEDIATE_DIR", kTrain, "path", "", "`~/.heft/jobs/J/output/intermediate`",
     "artifacts written during training (kept with the job)", true},
    {"SM_CHECKPOINT_DIR", kTrain, "path", "", "`~/.heft/jobs/J/checkpoints`",
     "checkpoints; the same directory across restarts", true},
    {"TRAINING_JOB_NAME", kTrain, "text", "", "`fashion-cnn`", "the job's name", true},
    {"SM_TRAINING_ENV", kTrain, "JSON object", "", "`{\"current_host\":\"algo-1\",...}`",
     "the training toolkit's whole environment as one object ([its fields](jobs.md#the-training-toolkits-contract))", true},
    {"SM_RESOURCE_CONFIG", kTrain, "JSON object", "", "`{\"current_host\":\"algo-1\",\"hosts\":[...],...}`",
     "`resourceconfig.json`: `current_host`, `current_instance_type` (`local`), "
     "`current_group_name` (`homogeneousCluster`), `hosts`, `instance_groups`, "
     "`network_interface_name`", true},
    {"SM_INPUT_DIR", kTrain, "path", "", "`~/.heft/jobs/J/input/algo-1`", "this host's input folder", true},
    {"SM_INPUT_CONFIG_DIR", kTrain, "path", "", "`~/.heft/jobs/J/input/algo-1/config`",
     "`hyperparameters.json`, `resourceconfig.json`, `inputdataconfig.json`; beside it "
     "`data/<channel>`, a link to each channel's directory", true},
    {"SM_NETWORK_INTERFACE_NAME", kTrain, "text", "", "`lo`",
     "`GLOO_SOCKET_IFNAME` when set, else the interface holding `MASTER_ADDR`, else `eth0`", true},
    {"SM_CURRENT_INSTANCE_TYPE", kTrain, "text", "", "`ml.c5.2xlarge`",
     "the spec's `cluster.instance_type` (the estimator's `instance_type`), default `local`: "
     "what the job says it runs on; one group of identical instances", true},
    {"SM_CURRENT_INSTANCE_GROUP", kTrain, "text", "", "`homogeneousCluster`", "that group's name", true},
    {"SM_CURRENT_INSTANCE_GROUP_HOSTS", kTrain, "JSON list", "", "`[\"algo-1\"]`", "as in SM_TRAINING_ENV", true},
    {"SM_INSTANCE_GROUPS", kTrain, "JSON list", "", "`[\"homogeneousCluster\"]`", "as in SM_TRAINING_ENV", true},
    {"SM_INSTANCE_GROUPS_DICT", kTrain, "JSON object", "", "`{\"homogeneousCluster\":{...}}`", "as in SM_TRAINING_ENV", true},
    {"SM_DISTRIBUTION_INSTANCE_GROUPS", kTrain, "JSON list", "", "`[]`", "as in SM_TRAINING_ENV", true},
    {"SM_IS_HETERO", kTrain, "boolean", "", "`false`", "as in SM_TRAINING_ENV", true},
    // heft's own
    {"HEFT_STORE", kEvery, "host:port", "not in a job: heft-train trains alone", "`127.0.0.1:38651`",
     "heft's rendezvous store", true},
    {"HEFT_TOKEN", kEvery, "64 hex characters", "", "",
     "the job token; the store and every link refuse a peer that cannot prove it knows it. "
     "Fresh for every run", true},
    {"HEFT_TIMEOUT", kEvery, "integer >= 1 (seconds)", "300", "`300`",
     "how long a collective or the rendezvous waits for a peer (`heft run --timeout`, "
     "`stopping.timeout_s`); also the Python backend's default timeout", true},
    {"HEFT_HOST", kEvery, "text", "every rank on one host", "`algo-2`",
     "this worker's host, as SM_CURRENT_HOST; heft's transports group ranks into hosts by it", true},
    {"HEFT_CPUS", kEvery, "CPU list", "not bound", "`1`",
     "the cores this worker is bound to, when it is ([run.md](run.md#placement-on-cores))"},
    {"HEFT_RECOVERY", kTrain, "`in_place`", "a lost rank stops the group", "`in_place`",
     "the spec's `retry.in_place`: a rank killed by a signal is restarted alone and the others "
     "rejoin it, taking its state from theirs ([recovery.md](recovery.md))", true},
    {"HEFT_GENERATION", "the local launcher", "integer >= 0", "0", "`1`",
     "the world a restarted rank joins: its group is `<HEFT_JOB>/world.g<N>` (0: `<HEFT_JOB>/world`)",
     true},
    {"HEFT_STOP_GRACE_MS", "mpirun, Slurm", "integer >= 0 (ms)", "5000", "`5000`",
     "how long the rank's shim waits after SIGTERM before SIGKILL", true},
    {"HEFT_MPI_HOSTS", "mpirun", "comma-separated names", "", "`node1,node2`",
     "the hostfile's hosts in order: `heft mpi-worker` maps OMPI_COMM_WORLD_* onto the contract "
     "with it", true},
    {"HEFT_JOB", kTrain, "text", "heft", "`fashion-cnn`",
     "the job's name: the store namespace of `heft::comm::init()` and of backend heft's "
     "`init_process_group()`", true},
    {"HEFT_JOB_DIR", kTrain, "path", "", "`~/.heft/jobs/J`", "the job's directory", true},
    {"HEFT_OPT_ML", kTrain, "0 or 1", "0: no /opt/ml", "`1`",
     "1: the worker starts in a mount namespace of its own where /opt/ml is the job's folders "
     "(model, checkpoints, local_checkpoints, output, input), as in the managed container "
     "([jobs.md](jobs.md#optml)); a spec's `environment` may set 0"},
    {"HEFT_DISTRIBUTION", kTrain, "JSON object", "`{}`: data parallel over every rank",
     "`{\"dataparallel\":{\"enabled\":true}}`",
     "the distribution the run uses, resolved: the spec's `distribution` in heft's form (the "
     "SDK's dicts mapped) with heft-train's hyperparameters over it; the worker merges nothing "
     "(a heft-train flag that would change a knob is refused)", true},
    {"HEFT_CHECKPOINT", kTrain, "JSON object", "heft-train's hyperparameters",
     "`{\"every_steps\":200,\"keep\":2}`", "the spec's `checkpoint`", true},
    {"HEFT_PROFILE_DIR", "heft train (profiler on)", "path", "no step profile", "`~/.heft/jobs/J/profile`",
     "where each rank's step profiler appends `rank-$RANK.steps`"},
    {"HEFT_TRACE_DIR", "heft train (profiler on)", "path", "no collective trace",
     "`~/.heft/jobs/J/profile/trace`", "where each rank's collective trace goes"},
    {"HEFT_SYSTEM_SAMPLE_MS", "heft train (profiler on)", "integer >= 1 (ms)", "no samples", "`1000`",
     "how often the engines' worker shims sample their rank's processes"},
};

bool matches(std::string_view pattern, std::string_view name) {
  const size_t open = pattern.find('<');
  if (open == std::string_view::npos) return pattern == name;
  const std::string_view prefix = pattern.substr(0, open);
  return name.size() > prefix.size() && name.substr(0, prefix.size()) == prefix;
}

const std::string* value_of(const Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

std::optional<std::string> text(const Environment& env, const char* name) {
  const std::string* v = value_of(env, name);
  return v ? std::optional<std::string>(*v) : std::nullopt;
}

std::optional<int64_t> integer(const Environment& env, const char* name, int64_t min_value,
                               const char* unit) {
  const std::string* v = value_of(env, name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE || x < min_value || x > INT32_MAX)
    throw InvalidArgument(std::string(name) + ": expected an integer >= " +
                          std::to_string(min_value) + unit + ", found '" + *v + "'");
  return x;
}

std::string cell(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

const std::vector<Variable>& worker_variables() { return kWorkerVariables; }

const Variable* find_variable(std::string_view name) {
  for (const Variable& v : kWorkerVariables)
    if (matches(v.name, name)) return &v;
  return nullptr;
}

bool reserved(std::string_view name) {
  if (name.substr(0, 3) == "SM_") return true;  // the training container's, all of them
  const Variable* v = find_variable(name);
  return v != nullptr && v->reserved;
}

std::string markdown(const std::vector<Variable>& rows) {
  std::string out =
      "| variable | set by | type | when unset | example | meaning | a spec may set it |\n"
      "| --- | --- | --- | --- | --- | --- | --- |\n";
  for (const Variable& v : rows)
    out += "| `" + std::string(v.name) + "` | " + cell(v.set_by) + " | " + cell(v.type) + " | " +
           (v.when_unset.empty() ? std::string("always set") : cell(v.when_unset)) + " | " +
           cell(v.example) + " | " + cell(v.meaning) + " | " + (v.reserved ? "no" : "yes") + " |\n";
  return out;
}

void HeftVariables::write(Environment& env) const {
  const auto put = [&](const char* name, const auto& field) {
    if (!field) return;
    if constexpr (std::is_same_v<std::decay_t<decltype(*field)>, std::string>)
      env[name] = *field;
    else
      env[name] = std::to_string(*field);
  };
  put("HEFT_STORE", store);
  put("HEFT_TOKEN", token);
  put("HEFT_JOB", job);
  put("HEFT_TIMEOUT", timeout_s);
  put("HEFT_HOST", host);
  put("HEFT_JOB_DIR", job_dir);
  put("HEFT_DISTRIBUTION", distribution);
  put("HEFT_CHECKPOINT", checkpoint);
  put("HEFT_STOP_GRACE_MS", stop_grace_ms);
  put("HEFT_CPUS", cpus);
  put("HEFT_RECOVERY", recovery);
  put("HEFT_GENERATION", generation);
}

HeftVariables HeftVariables::read(const Environment& env) {
  HeftVariables v;
  v.store = text(env, "HEFT_STORE");
  v.token = text(env, "HEFT_TOKEN");
  v.job = text(env, "HEFT_JOB");
  if (auto t = integer(env, "HEFT_TIMEOUT", 1, " (seconds)")) v.timeout_s = static_cast<int>(*t);
  v.host = text(env, "HEFT_HOST");
  v.job_dir = text(env, "HEFT_JOB_DIR");
  v.distribution = text(env, "HEFT_DISTRIBUTION");
  v.checkpoint = text(env, "HEFT_CHECKPOINT");
  v.stop_grace_ms = integer(env, "HEFT_STOP_GRACE_MS", 0, " (milliseconds)");
  v.cpus = text(env, "HEFT_CPUS");
  v.recovery = text(env, "HEFT_RECOVERY");
  if (v.recovery && *v.recovery != "in_place")
    throw InvalidArgument("HEFT_RECOVERY: expected in_place, found '" + *v.recovery + "'");
  if (auto g = integer(env, "HEFT_GENERATION", 0, "")) v.generation = static_cast<int>(*g);
  return v;
}

HeftVariables HeftVariables::from_process() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    if (text.compare(0, 5, "HEFT_") != 0) continue;
    const size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return read(env);
}

std::string world_group(const std::string& job, int generation) {
  return job + "/world" + (generation > 0 ? ".g" + std::to_string(generation) : "");
}

std::string generation_key(const std::string& job) { return job + "/generation"; }

std::string formed_key(const std::string& job) { return job + "/generation.formed"; }

std::string heft_home() {
  const char* home = std::getenv("HEFT_HOME");
  if (home != nullptr && *home != '\0') return home;
  const char* user_home = std::getenv("HOME");
  if (user_home == nullptr || *user_home == '\0') {
    const passwd* pw = ::getpwuid(::getuid());
    user_home = pw != nullptr ? pw->pw_dir : "/tmp";
  }
  return std::string(user_home) + "/.heft";
}

}  // namespace heft::contract
