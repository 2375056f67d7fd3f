#include "heft/job/launch/slurm_launcher.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "heft/comm/auth.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"
#include "heft/job/launch/external_group.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/slurm_batch.h"

namespace heft::job {

namespace {

std::string need(const Environment& env, const char* name) {
  return engine_variable(env, name, "slurm-worker", "slurm");
}

int need_int(const Environment& env, const char* name) {
  return engine_int(env, name, "slurm-worker", "slurm");
}

}  // namespace

std::vector<std::string> expand_hostlist(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  auto bad = [&] { return InvalidArgument("malformed Slurm host list '" + list + "'"); };
  while (i < list.size()) {
    std::string prefix;
    while (i < list.size() && list[i] != ',' && list[i] != '[') prefix += list[i++];
    if (i < list.size() && list[i] == '[') {
      const size_t close = list.find(']', i);
      if (close == std::string::npos) throw bad();
      const std::string ranges = list.substr(i + 1, close - i - 1);
      i = close + 1;
      std::string suffix;
      while (i < list.size() && list[i] != ',') suffix += list[i++];
      size_t p = 0;
      while (p <= ranges.size()) {
        const size_t comma = std::min(ranges.find(',', p), ranges.size());
        const std::string r = ranges.substr(p, comma - p);
        const size_t dash = r.find('-');
        const std::string lo = r.substr(0, dash), hi = dash == std::string::npos ? lo : r.substr(dash + 1);
        if (lo.empty() || hi.empty() || lo.find_first_not_of("0123456789") != std::string::npos ||
            hi.find_first_not_of("0123456789") != std::string::npos)
          throw bad();
        const long a = std::stol(lo), b = std::stol(hi);
        if (b < a || b - a > 100000) throw bad();
        for (long x = a; x <= b; ++x) {
          std::string n = std::to_string(x);
          if (n.size() < lo.size()) n = std::string(lo.size() - n.size(), '0') + n;
          out.push_back(prefix + n + suffix);
        }
        p = comma + 1;
      }
    } else if (!prefix.empty()) {
      out.push_back(prefix);
    }
    if (i < list.size() && list[i] == ',') ++i;
  }
  if (out.empty()) throw bad();
  return out;
}

std::vector<std::string> srun_argv(const SlurmOptions& o) {
  std::vector<std::string> argv = {o.srun,
                                   "--nodes=" + std::to_string(o.nodes),
                                   "--ntasks-per-node=" + std::to_string(o.processes_per_host),
                                   "--ntasks=" + std::to_string(o.nodes * o.processes_per_host),
                                   "--kill-on-bad-exit=1", "--export=ALL"};
  for (std::string& w : split_words(o.custom_srun_options)) argv.push_back(std::move(w));
  append_worker_shim(argv, o, "slurm-worker");
  return argv;
}

Environment slurm_worker_environment(const Environment& parent) {
  const int rank = need_int(parent, "SLURM_PROCID");
  const int size = need_int(parent, "SLURM_NTASKS");
  const int local_rank = need_int(parent, "SLURM_LOCALID");
  const int node = need_int(parent, "SLURM_NODEID");
  const std::vector<std::string> hosts = expand_hostlist(need(parent, "SLURM_JOB_NODELIST"));
  int local_size = 0;
  if (parent.count("SLURM_NTASKS_PER_NODE")) local_size = need_int(parent, "SLURM_NTASKS_PER_NODE");
  if (local_size < 1) local_size = std::max(1, size / static_cast<int>(hosts.size()));
  if (node >= static_cast<int>(hosts.size()))
    throw InvalidArgument("SLURM_NODEID " + std::to_string(node) + " is beyond SLURM_JOB_NODELIST's " +
                          std::to_string(hosts.size()) + " nodes");
  Environment env =
      engine_worker_environment(parent, rank, size, local_rank, local_size, node, hosts);
  env.emplace("MASTER_ADDR", hosts[0]);
  return env;
}

namespace {

void check_options(const SlurmOptions& o) {
  if (o.nodes < 1) throw InvalidArgument("--hosts: expected at least 1 node");
  if (o.processes_per_host < 1) throw InvalidArgument("-n: expected at least 1 task a node");
  if (o.command.empty()) throw InvalidArgument("no command given");
}

// NodeAddr of a Slurm node (scontrol show node), "" when Slurm does not say.
std::string node_address(const std::string& node) {
  try {
    const CommandOutput o = slurm_client({"scontrol", "show", "node", "-o", node});
    return o.exit_code == 0 ? scontrol_field(o.out, "NodeAddr") : "";
  } catch (const Error&) {
    return "";
  }
}

// One start: the store (fresh token) and srun's environment and arguments.
class SlurmStart : public ExternalStart {
 public:
  SlurmStart(const SlurmOptions& o, bool label) {
    std::string bind = o.store_bind_address;
    if (bind.empty()) {
      const char* nodelist = std::getenv("SLURM_JOB_NODELIST");
      char self[256] = {0};
      ::gethostname(self, sizeof(self) - 1);
      const std::string toward = nodelist && *nodelist ? expand_hostlist(nodelist)[0] : self;
      try {
        bind = local_address_toward(toward);
      } catch (const IoError&) {
        // A node name that does not resolve here: Slurm's own address for it (NodeAddr).
        const std::string addr = node_address(toward);
        if (addr.empty()) throw;
        bind = local_address_toward(addr);
      }
    }
    const std::string token = comm::random_token();
    store_ = std::make_unique<comm::TcpStoreServer>(comm::TcpStoreServerOptions{bind, 0, token});
    spawn_.env = current_environment();
    for (const auto& [k, v] : o.extra_env) spawn_.env[k] = v;
    // srun exports this whole environment: the workers' PYTHONPATH is what it has.
    const auto pythonpath = spawn_.env.find("PYTHONPATH");
    for (auto& [k, v] : engine_start_variables(
             o, bind, store_->port(), token,
             pythonpath == spawn_.env.end() ? "" : pythonpath->second))
      spawn_.env[k] = std::move(v);
    spawn_.env.erase("MASTER_ADDR");  // the first node, set by slurm-worker
    spawn_.argv = srun_argv(o);
    if (label) spawn_.argv.insert(spawn_.argv.begin() + 1, "--label");
    spawn_.capture_output = label;
    if (!o.batch_dir.empty()) {  // sbatch the srun above and follow it
      std::vector<std::string> follow = {
          o.heft_binary, "slurm-batch", "--dir", o.batch_dir, "--name", o.job_name,
          "--nodes", std::to_string(o.nodes), "--tasks-per-node",
          std::to_string(o.processes_per_host), "--sbatch-options", o.custom_sbatch_options, "--"};
      follow.insert(follow.end(), spawn_.argv.begin(), spawn_.argv.end());
      spawn_.argv = std::move(follow);
    }
  }
  SpawnOptions spawn() const override { return spawn_; }
  std::optional<std::string> peek(const std::string& key) const override {
    return store_->peek(key);
  }

 private:
  std::unique_ptr<comm::TcpStoreServer> store_;
  SpawnOptions spawn_;
};

// srun --label lines: "3: text" (the task number, a colon, a space).
bool parse_labelled(std::string_view l, ExternalLine* out) {
  const auto colon = l.find(": ");
  if (colon == std::string_view::npos || colon == 0 || colon > 7) return false;
  size_t first = 0;
  while (first < colon && l[first] == ' ') ++first;
  const std::string n(l.substr(first, colon - first));
  if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) return false;
  out->rank = std::atoi(n.c_str());
  out->is_stderr = false;
  out->text = l.substr(colon + 2);
  return true;
}

// srun's "srun: error: n2: task 2: Exited with exit code 5".
bool srun_task_exit(std::string_view l, int* rank, int* code) {
  const std::string_view kExited = ": Exited with exit code ";
  const size_t exited = l.find(kExited);
  const size_t task = l.rfind("task ", exited);
  if (exited == std::string_view::npos || task == std::string_view::npos) return false;
  const std::string n(l.substr(task + 5, exited - task - 5));
  if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) return false;
  *rank = std::atoi(n.c_str());
  *code = std::atoi(std::string(l.substr(exited + kExited.size())).c_str());
  return *code != 0;
}

}  // namespace

GroupEnd run_srun_group(const SlurmOptions& o, const LauncherHooks& hooks,
                        std::chrono::milliseconds grace) {
  check_options(o);
  ExternalGroup g;
  g.world = o.nodes * o.processes_per_host;
  g.group = o.job_name + "/world";
  g.engine = o.batch_dir.empty() ? "srun" : "sbatch";
  g.log_name = o.log_name;
  g.host_of_rank = [&o](int rank) {
    return "node " + std::to_string(rank / o.processes_per_host) + " of the allocation";
  };
  g.parse = parse_labelled;
  g.rank_exit = srun_task_exit;
  g.start = [&o]() -> std::unique_ptr<ExternalStart> { return std::make_unique<SlurmStart>(o, true); };
  return run_external_group(g, hooks, grace);
}

int run_srun(const SlurmOptions& o) {
  check_options(o);
  SlurmStart start(o, false);
  return run_external_passthrough(start, o.log_name, "slurm-client");
}

}  // namespace heft::job
