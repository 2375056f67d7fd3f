#include "heft/job/launch/slurm_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "heft/comm/auth.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"
#include "heft/job/launch/external_group.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/process.h"

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

CommandOutput client(const std::vector<std::string>& argv);
std::string field(const std::string& line, const std::string& key);

// NodeAddr of a Slurm node (scontrol show node), "" when Slurm does not say.
std::string node_address(const std::string& node) {
  try {
    const CommandOutput o = client({"scontrol", "show", "node", "-o", node});
    return o.exit_code == 0 ? field(o.out, "NodeAddr") : "";
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
  std::optional<std::string> abort_record(const std::string& group) const override {
    return store_->peek(group + "/abort");
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

namespace {

volatile sig_atomic_t g_batch_signal = 0;
void note_batch_signal(int sig) { g_batch_signal = sig; }

std::string shell_quote(const std::string& w) {
  std::string q = "'";
  for (char c : w) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// Runs a Slurm client (bounded: a client hangs while the controller is down).
CommandOutput client(const std::vector<std::string>& argv) {
  SpawnOptions so;
  so.argv = argv;
  so.env = current_environment();
  return run_command(so, std::chrono::seconds(30));
}

// "KEY=value" out of `scontrol show job -o` (one line, fields separated by blanks).
std::string field(const std::string& line, const std::string& key) {
  const std::string k = key + "=";
  for (size_t p = 0; (p = line.find(k, p)) != std::string::npos; p += k.size()) {
    if (p != 0 && line[p - 1] != ' ') continue;
    const size_t end = line.find(' ', p);
    return line.substr(p + k.size(), end == std::string::npos ? std::string::npos : end - p - k.size());
  }
  return "";
}

bool terminal_state(const std::string& state) {
  return state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" &&
         state != "COMPLETING" && state != "SUSPENDED" && state != "REQUEUED" &&
         state != "RESIZING" && state != "SIGNALING" && state != "STAGE_OUT" && !state.empty();
}

// Writes <dir>/batch.sh, which runs the srun command; returns its path.
std::string write_batch_script(const BatchOptions& o) {
  std::error_code ec;
  std::filesystem::create_directories(o.dir, ec);
  if (ec) throw IoError("heft slurm-batch: cannot create " + o.dir + ": " + ec.message());
  const std::string script = o.dir + "/batch.sh";
  std::string text = "#!/bin/sh\n# Written by heft for job " + o.job_name +
                     ": its workers, started by srun inside this allocation.\nexec";
  for (const std::string& w : o.srun_argv) text += " " + shell_quote(w);
  text += "\n";
  std::ofstream f(script, std::ios::trunc);
  f << text;
  f.close();
  if (!f || ::chmod(script.c_str(), 0755) != 0)
    throw IoError("heft slurm-batch: cannot write " + script);
  return script;
}

std::vector<std::string> sbatch_argv(const BatchOptions& o, const std::string& script) {
  std::vector<std::string> argv = {o.sbatch, "--parsable", "--job-name=" + o.job_name,
                                   "--nodes=" + std::to_string(o.nodes),
                                   "--ntasks-per-node=" + std::to_string(o.processes_per_host),
                                   "--ntasks=" + std::to_string(o.nodes * o.processes_per_host),
                                   "--output=" + o.dir + "/slurm-%j.out", "--export=ALL"};
  for (std::string& w : split_words(o.custom_sbatch_options)) argv.push_back(std::move(w));
  argv.push_back(script);
  return argv;
}

// A submitted batch job followed to its end: its output file copied to stdout as it grows,
// its state changes on stderr, scancel on a signal.
class BatchFollower {
 public:
  BatchFollower(const BatchOptions& o, std::string id)
      : o_(o), id_(std::move(id)), output_(o.dir + "/slurm-" + id_ + ".out") {}
  ~BatchFollower() {
    if (fd_ >= 0) ::close(fd_);
  }
  BatchFollower(const BatchFollower&) = delete;
  BatchFollower& operator=(const BatchFollower&) = delete;

  // Follows the job until it left the queue; returns its exit code (submit_and_follow).
  int run() {
    std::cerr << "submitted Slurm batch job " << id_ << " (output " << output_ << ")"
              << std::endl;
    for (;;) {
      if (g_batch_signal && !cancelled_by_) cancel(g_batch_signal);
      copy_output();
      if (!still_queued()) break;
      ::usleep(static_cast<useconds_t>(o_.poll.count() * 1000));
    }
    // The batch host may flush its last lines just after the job left the queue.
    const CommandOutput shown = client({o_.scontrol, "show", "job", "-o", id_});
    for (int i = 0; i < 4; ++i) {
      copy_output();
      ::usleep(100000);
    }
    copy_output();
    if (cancelled_by_) return 128 + cancelled_by_;
    return exit_code(shown.out);
  }

 private:
  void cancel(int sig) {
    cancelled_by_ = sig;
    const CommandOutput c = client({o_.scancel, id_});
    std::cerr << "cancelling Slurm batch job " << id_ << " (" << signal_name(sig) << ")"
              << (c.exit_code ? ": scancel: " + trim(c.err) : std::string()) << std::endl;
  }

  void copy_output() {
    if (fd_ < 0) fd_ = ::open(output_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return;
    char buf[65536];
    for (ssize_t n; (n = ::pread(fd_, buf, sizeof(buf), offset_)) > 0; offset_ += n)
      std::cout.write(buf, n);
    std::cout.flush();
  }

  // Asks squeue; reports a new state. False once the job left the queue or ended.
  bool still_queued() {
    const CommandOutput q = client({o_.squeue, "-h", "-j", id_, "-o", "%T %r"});
    const std::string line = trim(q.out);
    if (q.exit_code == 0 && line.empty()) return false;  // left the queue
    if (q.exit_code != 0) {
      if (q.err.find("Invalid job id") != std::string::npos) return false;
      std::cerr << "squeue: " << trim(q.err) << " (retrying)" << std::endl;
      return true;
    }
    const std::string now = line.substr(0, line.find(' '));
    const std::string why = line.find(' ') == std::string::npos ? "" : line.substr(line.find(' ') + 1);
    if (now != state_ || (now == "PENDING" && why != reason_))
      std::cerr << "Slurm batch job " << id_ << ": " << now
                << (now == "PENDING" && !why.empty() ? " (" + why + ")" : "") << std::endl;
    state_ = now;
    reason_ = why;
    return !terminal_state(now);
  }

  // From `scontrol show job -o`: the job's code, 128 + signal for a signalled task, 1 for a
  // job ended otherwise (cancelled, timed out, a node failed) or that Slurm forgot.
  int exit_code(const std::string& shown) const {
    const std::string job_state = field(shown, "JobState");
    const std::string code = field(shown, "ExitCode");
    const size_t colon = code.find(':');
    const int exit = colon == std::string::npos ? -1 : std::atoi(code.substr(0, colon).c_str());
    const int sig = colon == std::string::npos ? 0 : std::atoi(code.substr(colon + 1).c_str());
    std::cerr << "Slurm batch job " << id_ << " ended: "
              << (job_state.empty() ? state_.empty() ? "state unknown" : state_ : job_state)
              << (code.empty() ? "" : ", exit code " + code) << std::endl;
    if (exit > 0) return exit;
    if (sig > 0) return 128 + sig;
    if (exit == 0 && job_state == "COMPLETED") return 0;
    return 1;
  }

  const BatchOptions& o_;
  const std::string id_;
  const std::string output_;
  int cancelled_by_ = 0;
  int fd_ = -1;
  off_t offset_ = 0;
  std::string state_, reason_;
};

}  // namespace

int submit_and_follow(const BatchOptions& o) {
  if (o.srun_argv.empty()) throw InvalidArgument("heft slurm-batch: no srun command given");
  if (o.nodes < 1 || o.processes_per_host < 1)
    throw InvalidArgument("heft slurm-batch: --nodes and --tasks-per-node must be at least 1");
  const std::string script = write_batch_script(o);
  // From here a stop must cancel the batch job, even one that arrives while sbatch runs.
  struct sigaction sa {};
  sa.sa_handler = note_batch_signal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  const CommandOutput submitted = client(sbatch_argv(o, script));
  const std::string id = trim(submitted.out.substr(0, submitted.out.find(';')));
  if (submitted.exit_code != 0 || id.empty() ||
      id.find_first_not_of("0123456789") != std::string::npos) {
    std::cerr << "heft slurm-batch: sbatch failed (exit " << submitted.exit_code
              << "): " << trim(submitted.err + submitted.out) << "\n";
    return submitted.exit_code ? submitted.exit_code : 1;
  }
  return BatchFollower(o, id).run();
}

}  // namespace heft::job
