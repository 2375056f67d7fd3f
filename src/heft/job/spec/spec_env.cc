// The job's worker variables and command (spec_env.h).
#include "heft/job/spec/spec_env.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace heft::job {

namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

}  // namespace

std::vector<std::string> hyperparameter_args(const JobSpec& spec) {
  std::vector<std::string> args;
  for (const auto& [name, hp] : spec.hyperparameters) {  // std::map: sorted by name
    args.push_back("--" + name);
    args.push_back(hp.text);
  }
  return args;
}

Environment training_environment(const JobSpec& spec, const JobPaths& paths) {
  Environment env(spec.environment.begin(), spec.environment.end());
  nlohmann::json hps = nlohmann::json::object();
  for (const auto& [name, hp] : spec.hyperparameters) {
    hps[name] = hp.value;
    env["SM_HP_" + upper(name)] = hp.text;
  }
  env["SM_HPS"] = hps.dump();
  env["SM_USER_ARGS"] = nlohmann::json(hyperparameter_args(spec)).dump();
  nlohmann::json channels = nlohmann::json::array();
  for (const auto& [channel, dir] : spec.inputs) {
    channels.push_back(channel);
    env["SM_CHANNEL_" + upper(channel)] = dir;
  }
  env["SM_CHANNELS"] = channels.dump();
  env["SM_MODEL_DIR"] = paths.model;
  env["SM_OUTPUT_DIR"] = paths.output;
  env["SM_OUTPUT_DATA_DIR"] = paths.output_data;
  env["SM_CHECKPOINT_DIR"] = paths.checkpoints;
  env["TRAINING_JOB_NAME"] = spec.name;
  env["HEFT_JOB"] = spec.name;
  env["HEFT_DISTRIBUTION"] = spec.distribution.dump();
  env["HEFT_CHECKPOINT"] = nlohmann::json{{"every_steps", spec.checkpoint.every_steps},
                                          {"keep", spec.checkpoint.keep}}
                               .dump();
  return env;
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
