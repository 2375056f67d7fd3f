// `heft plan`: the automatic layout's candidates (docs/auto-layout.md), without training and
// without recording a job. cli/ does not link LibTorch, so this process becomes the one that
// profiles:
//   heft plan SPEC [--set key.path=value ...]   the spec read and checked as `heft train`
//     does, then `heft-train <the job's hyperparameters> --print-plan` with the job's
//     distribution (HEFT_DISTRIBUTION), world (instance_count x processes_per_host), ranks
//     per host and threads a worker would get;
//   heft plan --model NAME [-n N] [--memory_limit_gb G] [--measure] [--HYPERPARAMETER V ...]
//     heft-train's model NAME (gpt) by its hyperparameters, checked by heft-train's own
//     parser (config/hyperparameters.h), then `heft-train --model NAME ... --auto_layout true
//     --print-plan` for N ranks on this host;
//   heft plan --model FILE.py:FACTORY|MODULE:FUNCTION [-n N] [--memory_limit_gb G] [--measure]
//     [--global_batch B] [--optimizer O]   a PyTorch model: /usr/bin/python3 runs
//     heft.torch.parallel.layout.plan_main, which calls FACTORY() -> (model_or_layers,
//     example_batch[, tensor_plan]) and heft.torch.parallel.auto_layout.
// Without --measure one process profiles and prices the collectives with the defaults, and
// says so; with it `heft run -n N` starts N ranks on this host that measure the collectives
// (rank 0 profiles and prints). Exit codes: 0 with the ranked table; 2 when no layout fits the
// memory limit (the message names the smallest memory any layout needs) or the input is bad
// (the message names the flag or field); 1 when heft-train or Python cannot start.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/config/hyperparameters.h"
#include "heft/host/host.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"

namespace heft::cli {

namespace {

constexpr int kMaxPlanRanks = 1024;  // the search's largest world, as the default comm table's
// The Python with torch: the build's (.venv/bin/python, set-up's), else python3 on PATH.
#ifdef HEFT_PYTHON
constexpr const char* kPython = HEFT_PYTHON;
#else
constexpr const char* kPython = "python3";
#endif

struct PlanArgs {
  std::string spec_path;
  std::vector<std::string> overrides;
  std::string model;
  int ranks = 1;
  double memory_limit_gb = 0;
  bool measure = false;
  int global_batch = 0;
  std::string optimizer = "adamw";
  // What CLI11 did not take: SPEC, or heft-train's hyperparameters after --model NAME (a
  // positional SPEC option would swallow a hyperparameter's value).
  std::vector<std::string> extra;
  const CLI::App* app = nullptr;
};

bool given(const PlanArgs& a, const char* option) { return a.app->count(option) > 0; }

// A Python model is FILE.py:FACTORY or MODULE:FUNCTION; anything else names heft-train's model.
bool python_model(const std::string& model) { return model.find(':') != std::string::npos; }

int usage_error(const std::string& message) {
  std::cerr << "heft plan: " << message << " (heft plan --help)\n";
  return job::kExitBadSpec;
}

// Replaces this process with argv (heft-train, heft run or Python); returns 1 when it cannot.
int become(std::vector<std::string> argv) {
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  std::cout << std::flush;
  ::execv(raw[0], raw.data());
  std::cerr << "heft plan: cannot run " << argv[0] << ": " << std::strerror(errno) << "\n";
  return 1;
}

// The threads a worker of `ranks_per_host` would get, unless OMP_NUM_THREADS says.
void set_worker_threads(int ranks_per_host) {
  if (std::getenv("OMP_NUM_THREADS")) return;
  const int cores = host::online_cpus();
  ::setenv("OMP_NUM_THREADS", std::to_string(std::max(1, cores / ranks_per_host)).c_str(), 1);
}

// `command` on args.ranks ranks of this host: itself (one process, WORLD_SIZE = ranks, no
// store) or under `heft run -n ranks`, which measures the collectives.
int run_planner(const PlanArgs& args, std::vector<std::string> command) {
  ::unsetenv("HEFT_STORE");
  ::unsetenv("HEFT_DISTRIBUTION");
  ::unsetenv("SM_HPS");
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(args.ranks).c_str(), 1);
  set_worker_threads(args.ranks);
  if (!args.measure || args.ranks == 1) {
    ::setenv("WORLD_SIZE", std::to_string(args.ranks).c_str(), 1);
    std::cout << "plan: " << args.ranks << " ranks (1 host x " << args.ranks << "), profiled on this process\n";
    return become(std::move(command));
  }
  std::cout << "plan: " << args.ranks << " ranks (1 host x " << args.ranks << "), started here to measure the "
            << "collectives; rank 0 profiles\n";
  std::vector<std::string> run = {heft_binary_dir() + "/heft", "run", "-n", std::to_string(args.ranks),
                                  "--no-prefix", "--"};
  run.insert(run.end(), command.begin(), command.end());
  return become(std::move(run));
}

// --model NAME: heft-train's hyperparameters, checked by heft-train's parser here so that a
// bad one is named before anything runs.
int plan_builtin(const PlanArgs& args) {
  if (given(args, "--global_batch") || given(args, "--optimizer"))
    return usage_error(std::string(given(args, "--global_batch") ? "--global_batch" : "--optimizer") +
                       ": applies to a Python model (--model FILE.py:FACTORY); heft-train's model takes "
                       "--batch_size and --optimizer as hyperparameters");
  std::vector<std::string> hp = {"--model", args.model};
  hp.insert(hp.end(), args.extra.begin(), args.extra.end());
  hp.insert(hp.end(), {"--auto_layout", "true"});
  if (args.memory_limit_gb > 0) {
    std::ostringstream g;
    g << args.memory_limit_gb;
    hp.insert(hp.end(), {"--memory_limit_gb", g.str()});
  }
  const config::ParsedHyperparameters parsed = config::parse_hyperparameters(hp, "");
  if (!parsed.ok())
    return usage_error(parsed.error_name.empty() ? parsed.error
                                                 : "--" + parsed.error_name + ": " + parsed.error_text);
  std::vector<std::string> command = {heft_binary_dir() + "/heft-train"};
  command.insert(command.end(), hp.begin(), hp.end());
  command.push_back("--print-plan");
  return run_planner(args, std::move(command));
}

// --model FILE.py:FACTORY: heft.torch.parallel.layout.plan_main under Debian's Python.
int plan_python(const PlanArgs& args) {
  if (!args.extra.empty())
    return usage_error(args.extra.front() + ": not an option of heft plan --model FILE.py:FACTORY (a "
                       "Python model takes -n, --memory_limit_gb, --measure, --global_batch, --optimizer)");
  const std::string python_dir = heft_python_dir();
  if (python_dir.empty()) {
    std::cerr << "heft plan: --model " << args.model << ": this heft was built without its Python package\n";
    return 1;
  }
  const char* old = std::getenv("PYTHONPATH");
  ::setenv("PYTHONPATH", (python_dir + (old && *old ? ":" + std::string(old) : "")).c_str(), 1);
  std::ostringstream g;
  g << args.memory_limit_gb;
  return run_planner(args, {kPython, "-u", "-m", "heft.torch.parallel.layout.plan_main", args.model,
                            std::to_string(args.ranks), g.str(), std::to_string(args.global_batch),
                            args.optimizer});
}

int plan_spec(const PlanArgs& args) {
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
  ::setenv("HEFT_DISTRIBUTION", s.distribution_config.to_json().dump().c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(s.world_size()).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(s.cluster.processes_per_host).c_str(), 1);
  if (!s.environment.count("OMP_NUM_THREADS")) set_worker_threads(s.cluster.processes_per_host);
  std::vector<std::string> argv = command.value();
  argv.push_back("--print-plan");
  std::cout << "plan: " << s.world_size() << " ranks (" << s.cluster.instance_count << " hosts x "
            << s.cluster.processes_per_host << "), profiled on this process\n";
  return become(std::move(argv));
}

int plan(PlanArgs& args) {
  if (!args.extra.empty() && args.extra.front().rfind('-', 0) != 0) {  // a word first: SPEC
    args.spec_path = args.extra.front();
    args.extra.erase(args.extra.begin());
  }
  const bool spec = !args.spec_path.empty();
  if (spec == !args.model.empty())
    return usage_error(spec ? "SPEC and --model: give one or the other"
                            : "expected a SPEC or --model NAME|FILE.py:FACTORY");
  if (spec) {
    for (const char* o : {"-n", "--memory_limit_gb", "--measure", "--global_batch", "--optimizer"})
      if (given(args, o))
        return usage_error(std::string(o) + ": applies with --model; a spec gives its world in cluster and its "
                                            "limit as --set hyperparameters.memory_limit_gb=G");
    if (!args.extra.empty()) return usage_error(args.extra.front() + ": not an option of heft plan SPEC");
    return plan_spec(args);
  }
  if (!given(args, "-n") && args.measure) return usage_error("--measure: needs -n N, the ranks to measure on");
  return python_model(args.model) ? plan_python(args) : plan_builtin(args);
}

}  // namespace

Command add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Print the automatic layout's candidates, without training:\n"
      "  heft plan SPEC [--set KEY=VALUE]...   a heft-train job spec (docs/jobs.md)\n"
      "  heft plan --model NAME [-n N] [--memory_limit_gb G] [--measure] [--HYPERPARAMETER VALUE]...\n"
      "  heft plan --model FILE.py:FACTORY [-n N] [--memory_limit_gb G] [--measure] [--global_batch B] "
      "[--optimizer O]");
  args->app = cmd;
  cmd->add_option("--set", args->overrides,
                  "With SPEC: override a field: key.path=value (repeatable), e.g. "
                  "--set hyperparameters.memory_limit_gb=2")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  cmd->add_option("--model", args->model,
                  "Instead of SPEC: heft-train's model by name (gpt; its hyperparameters follow as "
                  "--name value, e.g. --n_layer 12 --batch_size 8), or a PyTorch model: FILE.py:FACTORY or "
                  "MODULE:FUNCTION, where FACTORY() returns (nn.Sequential or list of layers, example_batch[, "
                  "tensor_plan]); without tensor_parallel's plan the tensor degree is 1")
      ->type_name("NAME|FILE.py:FACTORY");
  cmd->add_option("-n", args->ranks, "With --model: the ranks to plan for (all on this host)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxPlanRanks));
  cmd->add_option("--memory_limit_gb", args->memory_limit_gb,
                  "With --model: memory per rank in GB (default: this host's available memory / N)")
      ->type_name("G")
      ->check(CLI::Range(1e-6, 1e6));
  cmd->add_flag("--measure", args->measure,
                "With --model: start N ranks here (heft run) and measure the collectives on them "
                "(default: one process, the default costs 50 us + bytes / 2 GB/s)");
  cmd->add_option("--global_batch", args->global_batch,
                  "With a Python model: samples per step over all ranks (default: example_batch's x N)")
      ->type_name("B")
      ->check(CLI::Range(1, 1 << 30));
  cmd->add_option("--optimizer", args->optimizer, "With a Python model: the optimizer whose state is priced")
      ->check(CLI::IsMember({"adamw", "adam", "sgd", "sgd-momentum"}));
  cmd->allow_extras();  // heft-train's hyperparameters after --model NAME; checked by its parser
  cmd->footer(
      "Examples:\n  heft plan job.yaml\n  heft plan --model gpt --n_layer 12 --n_embd 192 --n_head 4 "
      "--block_size 32 --batch_size 8 -n 4 --memory_limit_gb 2\n  heft plan --model my_model.py:build -n 4 "
      "--measure\nExit codes: 0 a layout fits, 2 none fits the memory limit or bad input, 1 heft-train or "
      "Python cannot run.\nWhat the plan models: docs/auto-layout.md");
  return [args, cmd]() -> int {
    args->extra = cmd->remaining();
    return plan(*args);
  };
}

}  // namespace heft::cli
