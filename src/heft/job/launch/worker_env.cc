// Builds each worker's environment (worker_env.h). The table of variables is docs/run.md;
// keep the two in step.
#include "heft/job/launch/worker_env.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "heft/error.h"

extern char** environ;

namespace heft::job {

namespace {

void require_at_least(const char* field, int value, int minimum) {
  if (value < minimum)
    throw InvalidArgument("worker environment: " + std::string(field) + " must be at least " +
                          std::to_string(minimum) + ", found " + std::to_string(value));
}

std::string hosts_json(int hosts) {
  nlohmann::json list = nlohmann::json::array();
  for (int h = 0; h < hosts; ++h) list.push_back(host_name(h));
  return list.dump();
}

}  // namespace

std::string host_name(int host_index) { return "algo-" + std::to_string(host_index + 1); }

Environment worker_environment(const JobEnvironment& job, int rank, const Environment& parent) {
  require_at_least("hosts", job.hosts, 1);
  require_at_least("processes_per_host", job.processes_per_host, 1);
  require_at_least("timeout_s", job.timeout_s, 1);
  require_at_least("num_cpus", job.num_cpus, 1);
  require_at_least("restart_count", job.restart_count, 0);
  const int world = job.hosts * job.processes_per_host;
  if (rank < 0 || rank >= world)
    throw InvalidArgument("worker environment: rank " + std::to_string(rank) +
                          " outside the world of " + std::to_string(world) + " ranks");
  const int host = rank / job.processes_per_host;
  const std::string host_id = host_name(host);

  Environment env = parent;
  // torchrun
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(rank % job.processes_per_host);
  env["WORLD_SIZE"] = std::to_string(world);
  env["LOCAL_WORLD_SIZE"] = std::to_string(job.processes_per_host);
  env["GROUP_RANK"] = std::to_string(host);
  env["MASTER_ADDR"] = job.master_addr;
  env["MASTER_PORT"] = std::to_string(job.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.restart_count);
  // the cloud training container
  env["SM_HOSTS"] = hosts_json(job.hosts);
  env["SM_CURRENT_HOST"] = host_id;
  env["SM_NUM_CPUS"] = std::to_string(job.num_cpus);
  env["SM_NUM_GPUS"] = "0";
  // heft
  env["HEFT_STORE"] = job.store_address;
  env["HEFT_TOKEN"] = job.token;
  env["HEFT_TIMEOUT"] = std::to_string(job.timeout_s);
  env["HEFT_HOST"] = host_id;
  // A user's own OMP_NUM_THREADS wins; otherwise split the cores between the workers that
  // share them: the simulated hosts of the local launcher all run on this machine, so that
  // is every worker (2 hosts x 1 worker on 2 cores: 1 thread each, not 2).
  if (parent.count("OMP_NUM_THREADS") == 0)
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, job.num_cpus / world));

  for (const auto& [name, value] : job.extra) env[name] = value;
  if (!job.python_path.empty()) {
    const auto it = env.find("PYTHONPATH");
    const bool has = it != env.end() && !it->second.empty();
    env["PYTHONPATH"] = has ? job.python_path + ":" + it->second : job.python_path;
  }
  return env;
}

Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));  // first definition wins, as getenv
  }
  return env;
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::vector<std::string> to_envp(const Environment& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace heft::job
