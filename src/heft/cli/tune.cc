// `heft tune SPEC [--name N] [--set key.path=value ...]`: runs a hyperparameter tuning job
// (docs/tuning.md): its trials are training jobs run by `heft train`, a live table of them
// on stdout, the best trial at the end. Exit codes as for jobs: 0 Completed, 1 Failed (no
// trial produced an objective), 2 a bad spec, 3 Stopped.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/job/paths.h"
#include "heft/job/supervisor.h"
#include "heft/tune/tuner.h"

namespace heft::cli {

namespace {

struct TuneArgs {
  std::string spec_path;
  std::string name;
  std::vector<std::string> overrides;
};

int tune(const TuneArgs& args) {
  std::vector<std::string> overrides = args.overrides;
  if (!args.name.empty()) overrides.push_back("name=" + args.name);
  const heft::Result<tune::TuningSpec> spec = tune::load_tuning_spec(args.spec_path, overrides);
  if (!spec.ok()) {
    std::cerr << "heft tune: " << spec.error() << "\n";
    return job::kExitBadSpec;
  }
  const std::string home = job::heft_home();
  if (const heft::Status made = job::make_home(home); !made.ok()) {
    std::cerr << "heft tune: " << made.error() << "\n";
    return 1;
  }
  tune::TunerOptions options;
  options.heft_binary = heft_binary_dir() + "/heft";
  options.home = home;
  options.out = &std::cout;
  const heft::Result<int> code = tune::run_tuning(spec.value(), options);
  if (!code.ok()) {  // as main reports heft::InvalidArgument: a bad command line or spec
    std::cerr << "heft: error: " << code.error() << "\n";
    return job::kExitBadSpec;
  }
  return code.value();
}

}  // namespace

Command add_tune_command(CLI::App& app) {
  auto args = std::make_shared<TuneArgs>();
  CLI::App* cmd = app.add_subcommand("tune", "Run a hyperparameter tuning job from a YAML spec");
  cmd->add_option("spec", args->spec_path, "The tuning spec (docs/tuning.md)")
      ->required()
      ->type_name("SPEC");
  cmd->add_option("--name", args->name, "The tuning job's name (overrides the spec's name)");
  cmd->add_option("--set", args->overrides,
                  "Replace one field of the tuning spec before validation: key.path=value")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  return [args]() -> int { return tune(*args); };
}

}  // namespace heft::cli
