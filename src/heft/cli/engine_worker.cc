// The worker shims every rank an engine starts runs (hidden commands):
//  - `heft mpi-worker -- CMD ARGS...` under `heft run --launcher mpirun` maps OpenMPI's
//    OMPI_COMM_WORLD_* variables onto the environment contract (job::mpi_worker_environment);
//  - `heft slurm-worker -- CMD ARGS...` under `--launcher slurm` maps SLURM_*
//    (job::slurm_worker_environment).
// Both point GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME at the interface that reaches the
// store (unless set) and run CMD as their child, watching the supervisor's liveness through
// the store: a rank whose supervisor is gone is stopped (job/launch/worker_shim.h).
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "heft/cli/commands.h"
#include "heft/error.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/slurm_launcher.h"
#include "heft/job/launch/worker_shim.h"

namespace heft::cli {

namespace {

// The interface that holds `address` on this host, or "".
std::string interface_of(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a && name.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) && address == buf) name = a->ifa_name;
  }
  ::freeifaddrs(list);
  return name;
}

// Gloo (and NCCL's socket transport) pick an interface from the host name, which on a
// cluster often resolves to loopback: points GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME at the
// interface this host reaches the store (HEFT_STORE) through, unless set.
void choose_socket_interface(job::Environment& env) {
  const auto store = env.find("HEFT_STORE");
  if (store == env.end()) return;
  try {
    const std::string host = store->second.substr(0, store->second.rfind(':'));
    const std::string ifname = interface_of(job::local_address_toward(host));
    if (ifname.empty() || ifname == "lo") return;
    env.emplace("GLOO_SOCKET_IFNAME", ifname);
    env.emplace("NCCL_SOCKET_IFNAME", ifname);
  } catch (const Error&) {
    // No route to the store: the worker's own connection attempt will say so.
  }
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
    job::ShimOptions options;
    options.name = "heft " + name;
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
