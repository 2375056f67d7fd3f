// The worker shims every rank an engine starts runs (hidden commands):
//  - `heft mpi-worker -- CMD ARGS...` under `heft run --launcher mpirun` maps OpenMPI's
//    OMPI_COMM_WORLD_* variables onto the environment contract (job::mpi_worker_environment);
//  - `heft slurm-worker -- CMD ARGS...` under `--launcher slurm` maps SLURM_*
//    (job::slurm_worker_environment).
// Both point GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME at the interface that reaches the
// store (unless set) and execute CMD in their place.
#include <ifaddrs.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "heft/cli/commands.h"
#include "heft/error.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/slurm_launcher.h"

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

// Executes `command` with `env` in place of this process (PATH from `env`); returns only on
// failure: 127 not found, 126 not executable, after one line on stderr led by `name`.
int exec_worker(const job::Environment& env, std::vector<std::string> command,
                const std::string& name) {
  std::vector<std::string> envp = job::to_envp(env);
  std::vector<char*> argv, envv;
  for (std::string& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : envp) envv.push_back(e.data());
  envv.push_back(nullptr);
  // PATH lookup with the worker's environment.
  const auto path = env.find("PATH");
  if (path != env.end()) ::setenv("PATH", path->second.c_str(), 1);
  ::execvpe(argv[0], argv.data(), envv.data());
  std::cerr << name << ": cannot execute '" << command[0] << "': " << std::strerror(errno) << "\n";
  return errno == ENOENT ? 127 : 126;
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
    return exec_worker(env, *command, "heft " + name);
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
