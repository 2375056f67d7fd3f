// The local launcher (local_launcher.h): starts the workers of each start of the group
// with their store and environment, then hands them to watch_group() (group_watch.h). The
// SignalPipe (signal_pipe.h) is held across restarts, so no signal falls between two starts;
// the store server's thread is started with its signals blocked, so the handler only ever
// interrupts this thread.
#include "heft/job/launch/local_launcher.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <memory>

#include "heft/comm/auth.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/contract/worker.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/job/launch/orphan_guard.h"
#include "heft/job/launch/job_cgroup.h"
#include "heft/job/launch/subreaper.h"
#include "heft/job/launch/placement.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/signal_pipe.h"

namespace heft::job {

namespace {

// The address workers dial for a store bound to `bind`, as "host:port".
std::string store_address(const std::string& bind, int port) {
  std::string host = bind;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

// What a worker will see in `name`: extra_env wins over this process's environment (as in
// worker_environment); "" when neither sets it.
std::string worker_variable(const LocalLauncherOptions& options, const Environment& parent,
                            const char* name) {
  if (const auto it = options.extra_env.find(name); it != options.extra_env.end()) return it->second;
  if (const auto it = parent.find(name); it != parent.end()) return it->second;
  return "";
}

// The environment every worker of one start shares, for a store at `store_port`.
JobEnvironment start_environment(const LocalLauncherOptions& options, const std::string& token,
                                 int store_port, int restart_count) {
  JobEnvironment job;
  job.token = token;
  job.hosts = options.hosts;
  job.processes_per_host = options.processes_per_host;
  job.master_port = free_port(job.master_addr);
  job.store_address = store_address(options.store_bind_address, store_port);
  job.timeout_s = options.timeout_s;
  job.num_cpus = available_cpus();
  job.num_gpus = visible_gpus();
  job.restart_count = restart_count;
  job.extra = options.extra_env;
  job.python_path = options.python_path;
  return job;
}

// A start that ended before all of its workers ran.
GroupEnd unstarted(int restart_count, int exit_code) {
  GroupEnd end;
  end.restart_count = restart_count;
  end.exit_code = exit_code;
  return end;
}

// Starts every worker of one start of the group and watches them until all are reaped.
GroupEnd run_once(const LocalLauncherOptions& options, SignalPipe& signals, int restart_count) {
  const std::string token = comm::random_token();
  std::unique_ptr<comm::TcpStoreServer> store;
  {
    ScopedSignalBlock block;  // the store's thread inherits the blocked mask
    store = std::make_unique<comm::TcpStoreServer>(
        comm::TcpStoreServerOptions{options.store_bind_address, 0, token});
  }
  const JobEnvironment job = start_environment(options, token, store->port(), restart_count);
  const Environment parent = current_environment();
  const int world = options.hosts * options.processes_per_host;
  // Every simulated host runs on this machine: place all the workers on its CPUs.
  const Bind bind = parse_bind(worker_variable(options, parent, "HEFT_BIND"));
  const std::vector<std::vector<int>> placement = plan_placement(allowed_cpus(), world, bind);
  // Every worker and all it starts in one cgroup, where the machine allows (job_cgroup.h).
  std::string no_cgroup;
  std::unique_ptr<JobCgroup> cgroup = JobCgroup::create(&no_cgroup);
  if (!cgroup) spdlog::debug("{}: no cgroup for the workers ({}); the subreaper alone", options.log_name, no_cgroup);
  // Should this process die, what the workers started dies with them (declared before the
  // workers: it says goodbye once they are reaped).
  OrphanGuard orphans(cgroup ? cgroup->kill_fd() : -1);
  std::vector<std::unique_ptr<Process>> workers;
  // Starts rank `rank` in `generation` (0: the start's first world).
  auto spawn_rank = [&](int rank, int generation) {
    Environment env = worker_environment(job, rank, parent);
    contract::HeftVariables own;
    if (!placement[rank].empty()) own.cpus = cpu_list(placement[rank]);
    if (options.in_place_recoveries > 0) own.recovery = "in_place";
    if (generation > 0) own.generation = generation;
    own.write(env);
    SpawnOptions spawn{options.command, std::move(env),
                       options.prefix_output || options.hooks.on_line != nullptr,
                       placement[rank], options.worker_umask, cgroup ? cgroup->procs_fd() : -1,
                       /*opt_ml=*/true};
    workers.push_back(Process::spawn(spawn));
    orphans.watch(workers.back()->pid());  // each worker leads its own process group
    return workers.back().get();
  };
  for (int rank = 0; rank < world; ++rank) {
    // Ctrl-C or SIGTERM while workers are still being started: start no more; the ones
    // started are killed and reaped as `workers` goes (~Process).
    if (const int sig = signals.pending_interrupt()) {
      std::cerr << options.log_name << ": " << strsignal(sig) << " while starting workers ("
                << rank << " of " << world << " started); stopping them" << std::endl;
      GroupEnd end = unstarted(restart_count, 128 + sig);
      end.interrupt_signal = sig;
      return end;
    }
    try {
      spawn_rank(rank, 0);
    } catch (const SpawnError& e) {
      std::cerr << options.log_name << ": " << e.what() << std::endl;
      GroupEnd end = unstarted(restart_count, e.exit_code());
      end.spawn_error = e.what();
      return end;  // ~Process kills and reaps the ranks already started
    }
  }
  if (options.hooks.on_start) {
    std::vector<int> pids;
    for (const auto& w : workers) pids.push_back(static_cast<int>(w->pid()));
    options.hooks.on_start(restart_count, pids);
  }
  // comm::init() names the world group after HEFT_JOB (contract::kDefaultJob when unset).
  const std::string job_name = worker_variable(options, parent, "HEFT_JOB");
  const std::string group = (job_name.empty() ? contract::kDefaultJob : job_name) + "/world";
  WatchOptions watch{options.grace, options.log_name, {}, {}, {}, options.in_place_recoveries};
  std::unique_ptr<comm::TcpStore> publisher;  // the launcher's own client of the start's store
  const std::string job_key = job_name.empty() ? contract::kDefaultJob : job_name;
  if (options.in_place_recoveries > 0) {
    watch.publish = [&](int generation) {
      if (!publisher) publisher = comm::TcpStore::connect(job.store_address, token, std::chrono::seconds(10));
      const std::string g = std::to_string(generation);
      publisher->set(contract::generation_key(job_key), comm::Bytes(g.begin(), g.end()));
    };
    watch.respawn = [&](int rank, int generation) { return spawn_rank(rank, generation); };
    watch.formed = [&] {
      const std::optional<std::string> v = store->peek(contract::formed_key(job_key));
      return v ? std::atoi(v->c_str()) : 0;
    };
  }
  GroupEnd end = watch_group(options.hooks, watch, workers, signals, *store, group);
  end.restart_count = restart_count;
  // What the workers left outside their groups (setsid, a daemon) was reparented here; what
  // still runs in the job's cgroup (its parent still alive) ends with it.
  end_adopted(options.grace, options.log_name);
  if (cgroup) cgroup->end(options.grace + std::chrono::seconds(2), options.log_name);
  return end;
}

}  // namespace

int free_port(const std::string& address) {
  comm::tcp::Socket probe = comm::tcp::listen_on(address, 0);
  return comm::tcp::local_port(probe);
}

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw InvalidArgument("local launcher: " + what);
  };
  require(options_.hosts >= 1, "hosts must be at least 1, found " +
                                   std::to_string(options_.hosts));
  require(options_.processes_per_host >= 1, "processes_per_host must be at least 1, found " +
                                                std::to_string(options_.processes_per_host));
  require(static_cast<long>(options_.hosts) * options_.processes_per_host <= kMaxWorkers,
          "at most " + std::to_string(kMaxWorkers) + " workers (hosts x processes_per_host), found " +
              std::to_string(static_cast<long>(options_.hosts) * options_.processes_per_host));
  require(!options_.command.empty(), "command must not be empty");
  require(options_.timeout_s >= 1, "timeout_s must be at least 1, found " +
                                       std::to_string(options_.timeout_s));
  require(options_.grace.count() >= 0, "grace must not be negative");
  parse_bind(worker_variable(options_, current_environment(), "HEFT_BIND"));
}

int LocalLauncher::run() { return run_group().exit_code; }

GroupEnd LocalLauncher::run_group() {
  SignalPipe signals;  // held across restarts, so no signal falls between two starts
  become_subreaper();  // a worker's descendants that leave its group come back here
  end_stale_cgroups(options_.log_name);  // what a SIGKILLed launcher before this one left
  for (int restart_count = 0;; ++restart_count) {
    GroupEnd end = run_once(options_, signals, restart_count);
    if (end.interrupt_signal != 0 || !options_.hooks.restart || !options_.hooks.restart(end))
      return end;
  }
}

}  // namespace heft::job
