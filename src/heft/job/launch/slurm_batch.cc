// Following a Slurm batch job (slurm_batch.h).
#include "heft/job/launch/slurm_batch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "heft/error.h"
#include "heft/job/job_file.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

CommandOutput slurm_client(const std::vector<std::string>& argv) {
  SpawnOptions so;
  so.argv = argv;
  so.env = current_environment();
  return run_command(so, std::chrono::seconds(30));
}

std::string scontrol_field(const std::string& line, const std::string& key) {
  const std::string k = key + "=";
  for (size_t p = 0; (p = line.find(k, p)) != std::string::npos; p += k.size()) {
    if (p != 0 && line[p - 1] != ' ') continue;
    const size_t end = line.find(' ', p);
    return line.substr(p + k.size(), end == std::string::npos ? std::string::npos : end - p - k.size());
  }
  return "";
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
    const CommandOutput shown = slurm_client({o_.scontrol, "show", "job", "-o", id_});
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
    const CommandOutput c = slurm_client({o_.scancel, id_});
    std::cerr << "cancelling Slurm batch job " << id_ << " (" << signal_name(sig) << ")"
              << (c.exit_code ? ": scancel: " + trim(c.err) : std::string()) << std::endl;
  }

  // Copies what the output gained up to its size now, kJobFileChunk bytes at a time
  // (job_file.h: an output a task made a FIFO or a link is refused, said once, not waited on).
  void copy_output() {
    uint64_t end = 0;
    for (bool first = true; first || offset_ < end; first = false) {
      const JobFileRead read = read_job_file_range(output_, offset_, kJobFileChunk);
      if (!read.ok()) {
        if (read.status != JobFileStatus::kMissing && read.error != refused_)
          std::cerr << "heft slurm-batch: " << read.error << std::endl;
        refused_ = read.error;
        break;
      }
      if (first) end = read.size;
      if (read.bytes.empty()) break;
      std::cout.write(read.bytes.data(), static_cast<std::streamsize>(read.bytes.size()));
      offset_ = read.offset + read.bytes.size();
    }
    std::cout.flush();
  }

  // Asks squeue; reports a new state. False once the job left the queue or ended.
  bool still_queued() {
    const CommandOutput q = slurm_client({o_.squeue, "-h", "-j", id_, "-o", "%T %r"});
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
    const std::string job_state = scontrol_field(shown, "JobState");
    const std::string code = scontrol_field(shown, "ExitCode");
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
  uint64_t offset_ = 0;
  std::string refused_;  // why the output was last not read
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
  const CommandOutput submitted = slurm_client(sbatch_argv(o, script));
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
