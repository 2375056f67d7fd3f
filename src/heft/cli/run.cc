// `heft run [--hosts H] [-n P] [--timeout S] [--grace S] [--no-prefix] [--distribution JSON]
// -- CMD ARGS...`:
// the command line over job::LocalLauncher (docs/run.md); with `--launcher mpirun
// --hostfile F [--mpi-options "..."] [--store-address A]` over job::run_mpirun
// (docs/clusters.md). Parses and checks the options; everything else (store, workers,
// signals, exit code) is the launcher's.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "heft/cli/commands.h"
#include "heft/config/distribution.h"
#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/job/launch/local_launcher.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/slurm_launcher.h"

namespace heft::cli {

namespace {

struct RunArgs {
  int hosts = 1;
  int nproc_per_host = 1;
  int timeout_s = contract::kDefaultTimeoutS;
  double grace_s = 5.0;
  bool no_prefix = false;
  std::string launcher = "local";
  std::string hostfile;
  std::string mpi_options;
  std::string srun_options;
  std::string store_address;
  std::string distribution;  // JSON: a job spec's distribution block, heft's form or the SDK's dicts
  std::vector<std::string> command;
};

std::string number_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

void require_at_least(const std::string& option, double value, double minimum) {
  if (!(value >= minimum))
    throw CLI::ValidationError("heft run: " + option + " must be at least " +
                               number_text(minimum) + ", got " + number_text(value));
}

// --distribution as a job spec's block (config/distribution.h): the same checks, the errors led
// by "heft run: --distribution".
config::Distribution parse_distribution(const RunArgs& args) {
  const nlohmann::json block = nlohmann::json::parse(args.distribution, nullptr, false);
  if (block.is_discarded() || !block.is_object())
    throw CLI::ValidationError("heft run: --distribution: expected a JSON object (a job spec's "
                               "distribution block), found '" + args.distribution + "'");
  Result<config::Distribution> d = config::Distribution::parse(block);
  Status fits = d.ok() ? d.value().check_world(args.hosts * args.nproc_per_host)
                       : Status::failure(d.error());
  if (!fits.ok()) throw CLI::ValidationError("heft run: --distribution: " + fits.error());
  return d.value();
}

// What --distribution gives every worker: HEFT_DISTRIBUTION (heft's form, as `heft train`
// passes it), the training toolkit's framework parameters and, for model parallelism,
// SM_HP_MP_PARAMETERS (as `heft train` gives a script); and heft's Python path with
// the stand-ins the distribution asks for (worker_python_path).
void apply_distribution(const RunArgs& args, job::Environment* env, std::string* python_path) {
  *python_path = heft_python_dir();
  if (args.distribution.empty()) return;
  const config::Distribution d = parse_distribution(args);
  contract::HeftVariables heft;
  heft.distribution = d.to_json().dump();
  heft.write(*env);
  const nlohmann::json framework = d.launch.framework_parameters(args.nproc_per_host);
  if (!framework.empty()) (*env)["SM_FRAMEWORK_PARAMS"] = framework.dump();
  if (d.modelparallel.enabled) (*env)["SM_HP_MP_PARAMETERS"] = d.script_parameters().dump();
  *python_path = worker_python_path(d);
}

// Runs inside app.parse(), so a CLI::ParseError thrown here is reported by main like any
// other usage error (message, "Run with --help", CLI11's exit code).
void validate(const RunArgs& args) {
  require_at_least("--hosts", args.hosts, 1);
  require_at_least("--nproc-per-host", args.nproc_per_host, 1);
  require_at_least("--timeout", args.timeout_s, 1);
  require_at_least("--grace", args.grace_s, 0);
  if (!std::isfinite(args.grace_s) || args.grace_s > 3600)
    throw CLI::ValidationError("heft run: --grace must be a number of seconds from 0 to 3600, got " +
                               number_text(args.grace_s));
  const long workers = static_cast<long>(args.hosts) * args.nproc_per_host;
  if (workers > job::kMaxWorkers)
    throw CLI::ValidationError("heft run: --hosts x --nproc-per-host must be at most " +
                               std::to_string(job::kMaxWorkers) + " workers, got " +
                               std::to_string(workers));
  if (args.launcher == "mpirun" && args.hostfile.empty())
    throw CLI::ValidationError("heft run: --launcher mpirun needs --hostfile F (one host a line)");
  if (args.launcher != "mpirun" && (!args.hostfile.empty() || !args.mpi_options.empty()))
    throw CLI::ValidationError("heft run: --hostfile and --mpi-options need --launcher mpirun");
  if (args.launcher != "slurm" && !args.srun_options.empty())
    throw CLI::ValidationError("heft run: --srun-options needs --launcher slurm");
  if (!args.distribution.empty()) parse_distribution(args);
  if (args.command.empty())
    throw CLI::RequiredError(
        "heft run: no command given; usage: heft run [OPTIONS] -- CMD [ARGS...]",
        CLI::ExitCodes::RequiredError);
}

job::LocalLauncherOptions launcher_options(const RunArgs& args) {
  job::LocalLauncherOptions options;
  options.hosts = args.hosts;
  options.processes_per_host = args.nproc_per_host;
  options.command = args.command;
  options.timeout_s = args.timeout_s;
  options.grace = std::chrono::milliseconds(std::llround(args.grace_s * 1000.0));
  options.prefix_output = !args.no_prefix;
  options.worker_umask = user_umask();
  apply_distribution(args, &options.extra_env, &options.python_path);
  return options;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* run = app.add_subcommand(
      "run", "Run a command as H hosts x P workers on this machine, torchrun-style");
  run->add_option("--hosts", args->hosts, "Simulated hosts algo-1..algo-H")
      ->capture_default_str();
  run->add_option("-n,--nproc-per-host", args->nproc_per_host, "Worker processes per host")
      ->capture_default_str();
  run->add_option("--timeout", args->timeout_s,
                  "Communication timeout in seconds handed to workers (HEFT_TIMEOUT)")
      ->capture_default_str();
  run->add_option("--grace", args->grace_s,
                  "Seconds stopped workers get between SIGTERM and SIGKILL")
      ->capture_default_str();
  run->add_flag("--no-prefix", args->no_prefix,
                "Do not prefix output lines with [rank N]; workers write straight through");
  run->add_option("--launcher", args->launcher,
                  "local (processes here), mpirun (OpenMPI) or slurm (srun; --hosts nodes)")
      ->check(CLI::IsMember({"local", "mpirun", "slurm"}))
      ->capture_default_str();
  run->add_option("--hostfile", args->hostfile,
                  "mpirun: the hosts, one a line (NAME [slots=N]); -n workers on each")
      ->type_name("FILE");
  run->add_option("--mpi-options", args->mpi_options,
                  "mpirun: options appended to mpirun's own (e.g. \"--mca plm_rsh_agent ssh\")");
  run->add_option("--srun-options", args->srun_options,
                  "slurm: options appended to srun's own (e.g. \"--partition gpu\")");
  run->add_option("--store-address", args->store_address,
                  "mpirun, slurm: the address the store listens on (default: this machine's "
                  "address toward the first host)");
  run->add_option("--distribution", args->distribution,
                  "A job spec's distribution block as JSON, heft's form or the cloud SDK's "
                  "dicts: passed to the workers as heft train does; "
                  "'{\"smdistributed\": {\"dataparallel\": {\"enabled\": true}}}' puts the "
                  "vendor's data-parallel modules on their path (docs/porting.md)")
      ->type_name("JSON");
  run->add_option("command", args->command, "The command to run, after --")
      ->type_name("CMD");
  run->footer(
      "Put the command after --, so its own options are not read as heft's:\n"
      "  heft run --hosts 2 -n 2 -- python3 train.py --epochs 3\n"
      "Workers' environment, exit codes and signals: docs/run.md");
  run->callback([args] { validate(*args); });
  return [args]() -> int {
    auto engine = [&](job::EngineOptions& o) {
      o.processes_per_host = args->nproc_per_host;
      o.command = args->command;
      o.store_bind_address = args->store_address;
      o.timeout_s = args->timeout_s;
      apply_distribution(*args, &o.extra_env, &o.python_path);
      o.heft_binary = heft_binary_dir() + "/heft";
    };
    if (args->launcher == "mpirun") {
      heft::Result<std::vector<job::MpiHost>> hosts = job::read_hostfile(args->hostfile);
      if (!hosts.ok()) throw InvalidArgument(hosts.error());
      job::MpirunOptions o;
      engine(o);
      o.hosts = hosts.value();
      o.custom_mpi_options = args->mpi_options;
      return job::run_mpirun(o);
    }
    if (args->launcher == "slurm") {
      job::SlurmOptions o;
      engine(o);
      o.nodes = args->hosts;
      o.custom_srun_options = args->srun_options;
      return job::run_srun(o);
    }
    return job::LocalLauncher(launcher_options(*args)).run();
  };
}

}  // namespace heft::cli
