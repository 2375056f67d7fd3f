// `heft plan SPEC [--set key.path=value ...]`: the automatic layout's candidates for a
// heft-train job (docs/auto-layout.md), without training and without recording a job. The
// spec is read and checked as `heft train` does; then this process becomes
// `heft-train <the job's hyperparameters> --print-plan` (cli/ does not link LibTorch), with
// the job's distribution (HEFT_DISTRIBUTION), world (WORLD_SIZE = instance_count x
// processes_per_host), ranks per host (LOCAL_WORLD_SIZE) and threads a worker would get
// (OMP_NUM_THREADS), and no store: it profiles the model on this one process and prices the
// collectives with the defaults, which it says. Its output and exit code are heft-train's:
// 0 with the ranked table, 2 when no layout fits the memory limit (the message names the
// smallest memory any layout needs) or the spec is bad, 1 when heft-train cannot start.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"

namespace heft::cli {

namespace {

struct PlanArgs {
  std::string spec_path;
  std::vector<std::string> overrides;
};

int plan(const PlanArgs& args) {
  const Result<job::JobSpec> spec = job::load_spec(args.spec_path, args.overrides);
  if (!spec.ok()) {
    std::cerr << "heft plan: " << spec.error() << "\n";
    return job::kExitBadSpec;
  }
  const job::JobSpec& s = spec.value();
  if (!s.builtin_trainer()) {
    std::cerr << "heft plan: entry_point: expected heft-train (the plan profiles the built-in trainer's "
                 "model), found "
              << (s.entry_point.empty() ? std::string("none") : s.entry_point[0]) << "\n";
    return job::kExitBadSpec;
  }
  const Result<std::vector<std::string>> command = job::worker_command(s, heft_binary_dir());
  if (!command.ok()) {
    std::cerr << "heft plan: " << command.error() << "\n";
    return 1;
  }
  for (const auto& [name, value] : s.environment) ::setenv(name.c_str(), value.c_str(), 1);
  ::unsetenv("HEFT_STORE");  // heft-train alone, not joining a job
  ::setenv("HEFT_DISTRIBUTION", s.distribution_normalized.dump().c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(s.world_size()).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(s.cluster.processes_per_host).c_str(), 1);
  if (!s.environment.count("OMP_NUM_THREADS")) {
    const long cores = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    ::setenv("OMP_NUM_THREADS", std::to_string(std::max(1L, cores / s.cluster.processes_per_host)).c_str(), 1);
  }
  std::vector<std::string> argv = command.value();
  argv.push_back("--print-plan");
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::cout << "plan: " << s.world_size() << " ranks (" << s.cluster.instance_count << " hosts x "
            << s.cluster.processes_per_host << "), profiled on this process" << std::endl;
  ::execv(raw[0], raw.data());
  std::cerr << "heft plan: cannot run " << argv[0] << ": " << std::strerror(errno) << "\n";
  return 1;
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Print the automatic layout's candidates for a heft-train spec, without training");
  cmd->add_option("spec", args->spec_path, "The job spec (docs/jobs.md)")->required()->type_name("SPEC");
  cmd->add_option("--set", args->overrides,
                  "Override a field: key.path=value (repeatable), e.g. "
                  "--set hyperparameters.memory_limit_gb=2")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->footer(
      "Exit codes: 0 a layout fits, 2 none fits the memory limit or a bad spec, 1 heft-train "
      "cannot run.\nWhat the plan models: docs/auto-layout.md");
  return [args]() -> int { return plan(*args); };
}

}  // namespace heft::cli
