// The worker shims every rank an engine starts runs (hidden commands):
//  - `heft mpi-worker -- CMD ARGS...` under `heft run --launcher mpirun` maps OpenMPI's
//    OMPI_COMM_WORLD_* variables onto the environment contract (job::mpi_worker_environment);
//  - `heft slurm-worker -- CMD ARGS...` under `--launcher slurm` maps SLURM_*
//    (job::slurm_worker_environment).
// Both point GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME at the interface that reaches the
// store (unless set) and run CMD as their child, watching the supervisor's liveness through
// the store: a rank whose supervisor is gone is stopped (job/launch/worker_shim.h).
// For a training job (SM_HPS set: `heft train`) they complete the training toolkit's per-host
// contract as the local launcher does (SM_TRAINING_ENV, SM_RESOURCE_CONFIG, ...:
// job::add_training_toolkit_environment, after the interface is chosen, so the toolkit's
// network_interface_name is the one that reaches the store) and write the host's input
// config files (job::write_host_input_config; the host's ranks may all write them).
// With HEFT_SYSTEM_SAMPLE_MS (the profiler sets it: job_profiler.h) they also sample their
// rank's process group and their host's cores and memory that often and publish the samples
// in the store for the supervisor (profile::encode_rank_sample), naming the host by HEFT_HOST.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include "heft/cli/commands.h"
#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/slurm_launcher.h"
#include "heft/job/launch/worker_env.h"
#include "heft/job/launch/worker_shim.h"
#include "heft/profile/system_sampler.h"

namespace heft::cli {

namespace {

// Gloo (and NCCL's socket transport) pick an interface from the host name, which on a
// cluster often resolves to loopback: points GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME at the
// interface this host reaches the store (HEFT_STORE) through, unless set.
void choose_socket_interface(job::Environment& env) {
  const std::optional<std::string> store = contract::HeftVariables::read(env).store;
  if (!store) return;
  try {
    const std::string host = store->substr(0, store->rfind(':'));
    const std::string ifname = job::interface_holding(job::local_address_toward(host));
    if (ifname.empty() || ifname == "lo") return;
    env.emplace("GLOO_SOCKET_IFNAME", ifname);
    env.emplace("NCCL_SOCKET_IFNAME", ifname);
  } catch (const Error&) {
    // No route to the store: the worker's own connection attempt will say so.
  }
}

// The host's name for samples: HEFT_HOST (the engine's host list), else gethostname().
std::string host_name(const job::Environment& env) {
  const std::optional<std::string> host = contract::HeftVariables::read(env).host;
  if (host && host->find(' ') == std::string::npos) return *host;
  char buf[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "unknown";
  return buf;
}

// Samples of the rank's process group every HEFT_SYSTEM_SAMPLE_MS (unset or not a positive
// integer: none).
void add_sampling(const job::Environment& env, job::ShimOptions* options) {
  const auto it = env.find("HEFT_SYSTEM_SAMPLE_MS");
  if (it == env.end()) return;
  char* end = nullptr;
  const long long ms = std::strtoll(it->second.c_str(), &end, 10);
  if (ms <= 0 || !end || *end != '\0') return;
  options->sample_every = std::chrono::milliseconds(ms);
  auto sampler = std::make_shared<profile::SystemSampler>();
  auto started = std::make_shared<bool>(false);
  const std::string host = host_name(env);
  options->sample = [sampler, started, host](int pid) -> std::string {
    if (!*started) {  // the first read is the baseline
      *started = true;
      sampler->set_workers({pid});
      sampler->sample();
      return "";
    }
    profile::SystemSample s = sampler->sample();
    s.host = host;
    return profile::encode_rank_sample(s);
  };
}

// `heft <name> -- CMD`: `environment` maps the engine's variables onto the contract.
Command add_engine_worker_command(CLI::App& app, const std::string& name,
                                  const std::string& description,
                                  job::Environment (*environment)(const job::Environment&)) {
  auto command = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(name, description);
  cmd->group("");  // hidden from help and from the list of commands
  cmd->add_option("command", *command, "The worker command, after --")->required();
  return [command, name, environment]() -> int {
    job::Environment env = environment(job::current_environment());
    choose_socket_interface(env);
    job::add_training_toolkit_environment(env);
    if (const Status written = job::write_host_input_config(env); !written.ok()) {
      std::cerr << "heft " << name << ": rank " << env["RANK"] << ": " << written.error() << "\n";
      return 1;
    }
    job::ShimOptions options;
    options.name = "heft " + name;
    add_sampling(env, &options);
    return job::run_worker_shim(env, *command, options);
  };
}

}  // namespace

Command add_mpi_worker_command(CLI::App& app) {
  return add_engine_worker_command(app, "mpi-worker", "Run CMD as a rank of an mpirun group",
                                   job::mpi_worker_environment);
}

Command add_slurm_worker_command(CLI::App& app) {
  return add_engine_worker_command(app, "slurm-worker", "Run CMD as a task of an srun group",
                                   job::slurm_worker_environment);
}

}  // namespace heft::cli
