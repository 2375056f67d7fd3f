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
// MASTER_ADDR (torch's env:// rendezvous, rank 0's host) is the engine's name for the first
// host; where that name does not resolve on a host (a cluster whose node names are not in DNS),
// the shim sets it to rank 0's address toward the store, which rank 0's shim publishes there.
// With HEFT_SYSTEM_SAMPLE_MS (the profiler sets it: job_profiler.h) they also sample their
// rank's process group and their host's cores and memory that often and publish the samples
// in the store for the supervisor (profile::encode_rank_sample), naming the host by HEFT_HOST.
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>

#include <netdb.h>

#include "heft/cli/commands.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/host/host.h"
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

bool resolves(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* found = nullptr;
  const bool ok = ::getaddrinfo(name.c_str(), nullptr, &hints, &found) == 0 && found;
  if (found) ::freeaddrinfo(found);
  return ok;
}

// Rank 0's shim publishes its address toward the store; a shim whose MASTER_ADDR does not
// resolve takes it (waiting up to HEFT_TIMEOUT). Without a store, nothing changes.
void reachable_master_address(job::Environment& env) {
  const contract::HeftVariables heft = contract::HeftVariables::read(env);
  const auto master = env.find("MASTER_ADDR");
  if (!heft.store || !heft.token || master == env.end()) return;
  const bool rank0 = env["RANK"] == "0";
  const bool unresolved = !resolves(master->second);
  if (!rank0 && !unresolved) return;
  const std::string key = heft.job_name() + "/world/master_addr";
  const auto timeout = std::chrono::seconds(heft.timeout());
  std::unique_ptr<comm::TcpStore> store = comm::TcpStore::connect(*heft.store, *heft.token, timeout);
  if (rank0) {
    const std::string store_host = heft.store->substr(0, heft.store->rfind(':'));
    const std::string mine = host::address_toward(store_host);
    store->set(key, mine.empty() ? master->second : mine);
  }
  if (unresolved) master->second = store->get_string(key, timeout);
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
    try {
      reachable_master_address(env);
    } catch (const Error& e) {
      std::cerr << "heft " << name << ": rank " << env["RANK"] << ": MASTER_ADDR " << env["MASTER_ADDR"]
                << " does not resolve here and rank 0's address did not come through the store: "
                << e.what() << "\n";
      return 1;
    }
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
