// The job's worker variables, command and input config files (spec_env.h).
#include "heft/job/spec/spec_env.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "heft/contract/worker.h"

namespace heft::job {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kDefaultLogLevel = 20;  // Python's logging.INFO, the toolkit's default

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// A framework parameter's value (sagemaker_program, ...), or `fallback`.
json framework_value(const JobSpec& spec, const std::string& name, json fallback) {
  const auto it = spec.hyperparameters.find(name);
  return it == spec.hyperparameters.end() ? fallback : it->second.value;
}

// The entry point's script: the first of its arguments that names a file, else the first
// that ends in .py (python3 -u train.py: train.py), else the program itself. Its directory
// (absolute) and file name.
std::pair<std::string, std::string> entry_script(const JobSpec& spec) {
  std::error_code ec;
  const size_t first = spec.builtin_trainer() ? spec.entry_point.size() : 1;
  for (bool need_file : {true, false})
    for (size_t i = first; i < spec.entry_point.size(); ++i) {
      const std::string& word = spec.entry_point[i];
      const fs::path p = fs::absolute(word, ec).lexically_normal();
      const bool script = word.size() > 3 && word.substr(word.size() - 3) == ".py";
      if (!ec && (need_file ? fs::is_regular_file(p, ec) : script))
        return {p.parent_path().string(), p.filename().string()};
    }
  const std::string program = spec.entry_point.empty() ? "" : spec.entry_point[0];
  return {fs::current_path(ec).string(), fs::path(program).filename().string()};
}

json framework_parameters(const JobSpec& spec) {
  json p = spec.distribution_config.launch.framework_parameters(spec.cluster.processes_per_host);
  for (const auto& [name, hp] : spec.hyperparameters)
    if (is_framework_parameter(name)) p[name] = hp.value;
  return p;
}

}  // namespace

std::vector<std::string> hyperparameter_args(const JobSpec& spec) {
  std::vector<std::string> args;
  for (const auto& [name, hp] : spec.hyperparameters) {  // std::map: sorted by name
    if (is_framework_parameter(name)) continue;
    args.push_back("--" + name);
    args.push_back(hp.value.is_boolean() ? (hp.value.get<bool>() ? "True" : "False") : hp.text);
  }
  return args;
}

json input_data_config(const JobSpec& spec) {
  json config = json::object();
  for (const auto& [channel, dir] : spec.inputs) {
    (void)dir;
    config[channel] = {{"TrainingInputMode", "File"},
                       {"S3DistributionType", "FullyReplicated"},
                       {"RecordWrapperType", "None"}};
  }
  return config;
}

json hyperparameters_file(const JobSpec& spec) {
  json file = json::object();
  for (const auto& [name, hp] : spec.hyperparameters) file[name] = hp.value.dump();
  const json framework = framework_parameters(spec);
  for (const auto& [name, value] : framework.items()) file[name] = value.dump();
  return file;
}

std::vector<std::string> job_hosts(const JobSpec& spec) {
  if (spec.cluster.launcher == "mpirun") return spec.cluster.hosts;
  std::vector<std::string> hosts;
  if (spec.cluster.launcher != "local") return hosts;
  for (int h = 0; h < spec.cluster.instance_count; ++h) hosts.push_back(host_name(h));
  return hosts;
}

Environment training_environment(const JobSpec& spec, const JobPaths& paths) {
  Environment env(spec.environment.begin(), spec.environment.end());
  json hps = json::object();
  for (const auto& [name, hp] : spec.hyperparameters) {
    if (is_framework_parameter(name)) continue;
    hps[name] = hp.value;
    env["SM_HP_" + upper(name)] = hp.text;
  }
  env["SM_HPS"] = hps.dump();
  env["SM_USER_ARGS"] = json(hyperparameter_args(spec)).dump();
  json channels = json::array();
  for (const auto& [channel, dir] : spec.inputs) {
    channels.push_back(channel);
    env["SM_CHANNEL_" + upper(channel)] = dir;
  }
  env["SM_CHANNELS"] = channels.dump();
  env["SM_INPUT_DATA_CONFIG"] = input_data_config(spec).dump();
  env["SM_FRAMEWORK_PARAMS"] = framework_parameters(spec).dump();
  const json level = framework_value(spec, "sagemaker_container_log_level", kDefaultLogLevel);
  env["SM_LOG_LEVEL"] = level.is_string() ? level.get<std::string>() : level.dump();
  const auto [module_dir, script] = entry_script(spec);
  const json program = framework_value(spec, "sagemaker_program", script);
  const std::string entry = program.is_string() ? program.get<std::string>() : script;
  const json submitted = framework_value(spec, "sagemaker_submit_directory", module_dir);
  env["SM_MODULE_DIR"] = submitted.is_string() ? submitted.get<std::string>() : module_dir;
  env["SM_USER_ENTRY_POINT"] = entry;
  env["SM_MODULE_NAME"] = entry.size() > 3 && entry.substr(entry.size() - 3) == ".py"
                              ? entry.substr(0, entry.size() - 3)
                              : entry;
  env["SM_FRAMEWORK_MODULE"] = "";
  const config::Distribution& d = spec.distribution_config;
  if (d.modelparallel.enabled) env["SM_HP_MP_PARAMETERS"] = d.script_parameters().dump();
  env["SM_MODEL_DIR"] = paths.model;
  env["SM_OUTPUT_DIR"] = paths.output;
  env["SM_OUTPUT_DATA_DIR"] = paths.output_data;
  env["SM_OUTPUT_INTERMEDIATE_DIR"] = paths.output_intermediate;
  env["SM_CHECKPOINT_DIR"] = paths.checkpoints;
  env["TRAINING_JOB_NAME"] = spec.name;
  env["SM_CURRENT_INSTANCE_TYPE"] = spec.cluster.instance_type;
  // The job's folders as /opt/ml (launch/opt_ml.h), unless the spec's environment says 0.
  env.emplace("HEFT_OPT_ML", "1");
  contract::HeftVariables heft;
  heft.job = spec.name;
  heft.job_dir = paths.root;
  // Resolved (the block with heft-train's hyperparameters over it): the worker merges nothing.
  heft.distribution = spec.distribution_config.to_json().dump();
  heft.checkpoint =
      json{{"every_steps", spec.checkpoint.every_steps}, {"keep", spec.checkpoint.keep}}.dump();
  heft.write(env);
  return env;
}

Status write_input_config(const JobSpec& spec, const JobPaths& paths) {
  if (spec.cluster.launcher != "local") return Status::success();  // written on the hosts
  const std::vector<std::string> hosts = job_hosts(spec);
  // Each host's files from the environment its workers get (worker_environment's host
  // variables; the local launcher's MASTER_ADDR is loopback), so the two cannot differ.
  Environment base = current_environment();
  for (const auto& [name, value] : training_environment(spec, paths)) base[name] = value;
  base["MASTER_ADDR"] = "127.0.0.1";
  base["SM_HOSTS"] = json(hosts).dump();
  for (const std::string& host : hosts) {
    Environment env = base;
    env["SM_CURRENT_HOST"] = host;
    add_training_toolkit_environment(env);
    if (Status s = write_host_input_config(env); !s.ok()) return s;
  }
  return Status::success();
}

Result<std::vector<std::string>> worker_command(const JobSpec& spec,
                                                const std::string& heft_dir) {
  std::vector<std::string> command = spec.entry_point;
  if (spec.builtin_trainer()) {
    const std::string trainer = heft_dir + "/" + kBuiltinTrainer;
    if (::access(trainer.c_str(), X_OK) != 0)
      return Result<std::vector<std::string>>::failure(
          "entry_point: heft-train: the built-in trainer is not built (expected the executable " +
          trainer + " next to heft; build with -DHEFT_WITH_TORCH=ON, or give a command list "
          "such as [python3, train.py])");
    command[0] = trainer;
  }
  const std::vector<std::string> args = hyperparameter_args(spec);
  command.insert(command.end(), args.begin(), args.end());
  return Result<std::vector<std::string>>::success(command);
}

}  // namespace heft::job
