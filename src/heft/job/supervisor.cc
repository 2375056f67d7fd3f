// The job supervisor (supervisor.h).
//
// Terms: a *start* is one run of the whole group (attempts counts them); a *stop reason* is
// why the supervisor itself asked the launcher to stop a start (heft stop, max runtime, max
// wait, a simulated interruption); the *running time* is the sum of the starts' durations
// (billable seconds are that times the instances: job_report.h), the *wall time* runs from
// the first start of this run of the supervisor, added to what a resumed job's record had
// (training seconds: the time a job sat Stopped or Failed before `heft resume` is not in it).
#include "heft/job/supervisor.h"

#include <fcntl.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "heft/job/job_file.h"
#include "heft/job/job_output.h"
#include "heft/job/record/job_report.h"
#include "heft/job/record/sqlite.h"
#include "heft/job/group_options.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/straggler_watch.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::job {

namespace {

namespace fs = std::filesystem;

constexpr size_t kFailureFileBytes = 1024;
constexpr double kMetricFlushSeconds = 0.5;
constexpr double kProgressWriteSeconds = 0.2;  // each write is one small transaction
constexpr size_t kStragglerTails = 4;  // stragglers whose last log lines the reason carries

enum class StopReason {
  kNone, kStopRequested, kMaxRuntime, kMaxWait, kInterrupted, kRule, kStragglers, kNoSpace
};

// Space the supervisor holds under $HEFT_HOME while a job runs, given back when the disk fills
// so that the job's end (its status, why, its times) can still be written.
constexpr off_t kReserveBytes = off_t{4} << 20;

std::string seconds_text(double s) { return number_text(std::round(s * 10) / 10) + " s"; }

// The first kFailureFileBytes of the worker's failure file, if it wrote one; `refused` gets
// why a failure file that is not a regular file was not read (job_file.h: the supervisor
// never waits on a file a worker made).
std::string failure_file(const JobPaths& paths, std::string* refused) {
  for (const std::string& path : {paths.output + "/failure", paths.output_data + "/failure"}) {
    JobFileRead read = read_job_file_range(path, 0, kFailureFileBytes);
    if (!read.ok()) {
      if (read.status != JobFileStatus::kMissing && refused->empty()) *refused = read.error;
      continue;
    }
    std::string& text = read.bytes;
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!text.empty()) return text;
  }
  return "";
}

std::optional<double> numeric_hyperparameter(const JobSpec& spec,
                                             std::initializer_list<const char*> names) {
  for (const char* name : names) {
    auto it = spec.hyperparameters.find(name);
    if (it != spec.hyperparameters.end() && it->second.value.is_number())
      return it->second.value.get<double>();
  }
  return std::nullopt;
}

}  // namespace

class Supervisor::Impl {
 public:
  Impl(JobDb& db, JobRecord job, JobSpec spec, JobPaths paths, std::vector<std::string> command,
       SupervisorOptions options)
      : db_(db),
        job_(std::move(job)),
        spec_(std::move(spec)),
        paths_(std::move(paths)),
        command_(std::move(command)),
        options_(std::move(options)),
        output_(paths_, spec_, options_.echo, options_.progress,
                ProgressLine(spec_.name, numeric_hyperparameter(spec_, {"epochs"}),
                             numeric_hyperparameter(spec_, {"max_steps", "steps"}))),
        // A resumed job (heft resume) continues its record's counters.
        training_start_(job_.training_start),
        training_before_(job_.training_seconds),
        billable_(job_.billable_seconds),
        attempts_(job_.attempts),
        interruptions_(job_.interruptions),
        stragglers_(std::chrono::milliseconds(
            std::llround(spec_.stopping.straggler_grace_s * 1000))) {}

  int run() {
    std::cerr << options_.log_name << ": job " << spec_.name << ": "
              << spec_.cluster.instance_count << " host"
              << (spec_.cluster.instance_count == 1 ? "" : "s") << " x "
              << spec_.cluster.processes_per_host << " worker"
              << (spec_.cluster.processes_per_host == 1 ? "" : "s") << ", logs in "
              << paths_.logs << std::endl;
    job_start_ = Clock::now();
    remove_failure_files();
    reserve_space();
    const LauncherHooks hooks = launcher_hooks();
    const GroupSettings group = group_settings();
    // Each rank's shim stops it when this process is gone, after the same grace.
    if (spec_.cluster.launcher == "mpirun") {
      MpirunOptions o = mpirun_options(spec_, group);
      o.worker_grace = stop_grace(spec_);
      return finish(run_mpirun_group(o, hooks, stop_grace(spec_)));
    }
    if (spec_.cluster.launcher == "slurm") {
      SlurmOptions o = slurm_options(spec_, group, paths_.root);
      o.worker_grace = stop_grace(spec_);
      return finish(run_srun_group(o, hooks, stop_grace(spec_)));
    }
    return finish(LocalLauncher(local_launcher_options(spec_, group, hooks)).run_group());
  }

 private:
  using Clock = std::chrono::steady_clock;

  // What the supervisor does as the group runs (group_watch.h), whichever launcher runs it.
  LauncherHooks launcher_hooks() {
    LauncherHooks hooks;
    hooks.on_line = [this](int rank, bool is_stderr, std::string_view line) {
      output_.line(rank, is_stderr, line, elapsed(job_start_));
      // heft-train's reporting rank, once the re-formed world took its first step's state.
      if (!is_stderr && line.rfind("recovered: ", 0) == 0)
        db_.transition(job_.id, secondary::kTraining, "Recovered in place: " + std::string(line.substr(11)));
    };
    hooks.on_start = [this](int restart_count, const std::vector<int>& pids) {
      stragglers_.start(spec_.world_size());
      try {
        on_start(restart_count);
      } catch (const NoSpace& e) {
        out_of_space(e.what());  // the next tick stops the start
      }
      if (options_.observer) options_.observer->on_start(restart_count, pids);
    };
    hooks.on_exit = [this](int rank, int wait_status) { stragglers_.exited(rank, wait_status); };
    hooks.on_recover = [this](int rank, int wait_status, int pid, int generation) {
      db_.transition(job_.id, secondary::kTraining,
                     "Rank " + std::to_string(rank) + " " + describe_wait_status(wait_status) +
                         ": restarted alone (pid " + std::to_string(pid) + "), the others rejoin it in generation " +
                         std::to_string(generation) + " (in-place recovery)");
    };
    hooks.on_store = [this](StorePeek peek) {
      if (options_.observer) options_.observer->on_store(std::move(peek));
    };
    hooks.on_tick = [this] {
      try {
        return on_tick();
      } catch (const NoSpace& e) {
        return out_of_space(e.what());
      }
    };
    hooks.restart = [this](const GroupEnd& end) {
      try {
        return restart(end);
      } catch (const NoSpace& e) {
        out_of_space(e.what());
        return false;
      }
    };
    return hooks;
  }

  // What every launcher is given besides the spec (group_options.h).
  GroupSettings group_settings() const {
    GroupSettings g;
    g.command = command_;
    g.extra_env = training_environment(spec_, paths_);
    if (options_.observer)
      for (const auto& [k, v] : options_.observer->environment()) g.extra_env[k] = v;
    g.log_name = options_.log_name;
    g.worker_umask = options_.worker_umask;
    g.python_path = options_.python_path;
    g.heft_binary = options_.heft_binary;
    return g;
  }

  static double elapsed(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }

  double running_seconds() const {
    return billable_ + (in_start_ ? elapsed(start_began_) : 0.0);
  }

  JobProgress progress() const {
    JobProgress p;
    p.attempts = attempts_;
    p.interruptions = interruptions_;
    p.billable_seconds = running_seconds();
    p.training_seconds =
        training_before_ + (run_training_start_ ? unix_now() - *run_training_start_ : 0.0);
    p.training_start = training_start_;
    return p;
  }

  void on_start(int restart_count) {
    ++attempts_;
    in_start_ = true;
    start_began_ = Clock::now();
    if (!run_training_start_) run_training_start_ = unix_now();
    if (!training_start_) training_start_ = run_training_start_;
    const int world = spec_.world_size();
    db_.transition(job_.id, secondary::kTraining,
                   restart_count == 0
                       ? "Training with " + std::to_string(world) + " workers"
                       : "Training resumed (restart " + std::to_string(restart_count) +
                             ", TORCHELASTIC_RESTART_COUNT=" + std::to_string(restart_count) +
                             ")");
    db_.update_progress(job_.id, progress());
  }

  // Asks the launcher to stop the start when one of the limits is reached.
  bool on_tick() {
    if (stop_reason_ == StopReason::kNoSpace) return true;  // writes nothing more
    output_.tick(db_, job_.id, kMetricFlushSeconds, status_text(), elapsed(job_start_));
    // The times are written as they pass, so they stay true if this process is killed.
    if (elapsed(last_progress_write_) >= kProgressWriteSeconds) {
      db_.update_progress(job_.id, progress());
      last_progress_write_ = Clock::now();
    }
    if (stop_reason_ != StopReason::kNone) return false;
    if (options_.observer) {
      const std::string why = options_.observer->on_tick();
      if (!why.empty()) {
        rule_message_ = why;
        const std::string where = options_.observer->diagnosis();
        if (!where.empty()) rule_message_ += "\n" + where;
        return stop(StopReason::kRule, secondary::kStopping, "Stopping: " + why,
                    status::kStopping);
      }
    }
    if (stop_stragglers()) return true;
    if (db_.stop_requested(job_.id)) {
      return stop(StopReason::kStopRequested, secondary::kStopping,
                  "Stopping: requested by heft stop", status::kStopping);
    }
    if (running_seconds() >= spec_.stopping.max_runtime_s) {
      return stop(StopReason::kMaxRuntime, secondary::kStopping,
                  "Stopping: the job ran for its max_runtime_s (" +
                      number_text(spec_.stopping.max_runtime_s) + " s)",
                  status::kStopping);
    }
    if (spot_wait_exceeded()) {
      return stop(StopReason::kMaxWait, secondary::kStopping,
                  "Stopping: the job reached its spot max_wait_s (" +
                      number_text(spec_.spot.max_wait_s) + " s)",
                  status::kStopping);
    }
    const SpotSpec& spot = spec_.spot;
    if (spot.enabled && interruptions_ < spot.simulate_count &&
        elapsed(start_began_) >= spot.simulate_every_s) {
      ++interruptions_;
      return stop(StopReason::kInterrupted, secondary::kInterrupted,
                  "Simulated spot interruption " + std::to_string(interruptions_) + " of " +
                      std::to_string(spot.simulate_count) + ": the instances are reclaimed",
                  "");
    }
    return false;
  }

  // Ranks still running stopping.straggler_grace_s after another exited 0 are stopped; the
  // job fails naming them, with what they were doing (the hang diagnosis, their last lines),
  // read now, while they still do it.
  bool stop_stragglers() {
    const std::vector<int> late = stragglers_.overdue();
    if (late.empty()) return false;
    const std::string who = rank_list_text(late);
    straggler_reason_ = who + (late.size() == 1 ? " was" : " were") + " still running " +
                        number_text(spec_.stopping.straggler_grace_s) + " s after " +
                        rank_list_text(stragglers_.finished()) +
                        " exited 0 (stopping.straggler_grace_s); stopped";
    const std::string where = options_.observer ? options_.observer->diagnosis() : "";
    if (!where.empty()) straggler_reason_ += "\n" + where;
    for (size_t i = 0; i < late.size() && i < kStragglerTails; ++i) {
      const std::string tail = output_.tail(late[i]);
      straggler_reason_ += "\nlast lines of logs/rank-" + std::to_string(late[i]) + ".log:" +
                           (tail.empty() ? std::string(" (none)") : "\n" + tail);
    }
    stop_reason_ = StopReason::kStragglers;
    output_.clear_progress();
    std::cerr << options_.log_name << ": " << who << " still running "
              << number_text(spec_.stopping.straggler_grace_s) << " s after "
              << rank_list_text(stragglers_.finished()) << " exited 0; stopping "
              << (late.size() == 1 ? "it" : "them") << std::endl;
    return true;
  }

  bool spot_wait_exceeded() const {
    return spec_.spot.enabled && elapsed(job_start_) >= spec_.spot.max_wait_s;
  }

  // The disk under $HEFT_HOME is full: the reserve goes, so the job's end can be written, and
  // the start is stopped as any stop is (SIGTERM, SIGKILL after the grace). Returns true:
  // stop the start.
  bool out_of_space(const std::string& what) {
    if (stop_reason_ == StopReason::kNoSpace) return true;
    release_space();
    stop_reason_ = StopReason::kNoSpace;
    no_space_ = what;
    output_.clear_progress();
    std::cerr << options_.log_name << ": no space left on the disk of " << paths_.root << " ("
              << what << "); stopping the workers" << std::endl;
    try {
      db_.transition(job_.id, secondary::kStopping, "Stopping: no space left on device",
                     status::kStopping);
    } catch (const IoError&) {
    }
    return true;
  }

  void reserve_space() {
    reserve_path_ = paths_.root + "/.space-reserve";
    const int fd = ::open(reserve_path_.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || ::posix_fallocate(fd, 0, kReserveBytes) != 0) release_space();
    if (fd >= 0) ::close(fd);
  }

  void release_space() {
    if (reserve_path_.empty()) return;
    ::unlink(reserve_path_.c_str());
    reserve_path_.clear();
  }

  // What an interrupted checkpoint write left (checkpoint_dir.h: .tmp-ckpt-*): never read,
  // and on a full disk the space the job's end needs.
  void remove_temporary_checkpoints() {
    std::error_code ec;
    for (auto it = fs::directory_iterator(paths_.checkpoints, ec);
         !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->path().filename().string().rfind(".tmp-ckpt-", 0) == 0) {
        std::error_code ignored;
        fs::remove_all(it->path(), ignored);
      }
  }

  bool stop(StopReason reason, const char* secondary_status, const std::string& message,
            const std::string& primary) {
    stop_reason_ = reason;
    output_.clear_progress();
    std::cerr << options_.log_name << ": " << message << std::endl;
    db_.transition(job_.id, secondary_status, message, primary);
    return true;
  }

  // A failure file is about the start that wrote it: removed before every start (not once
  // the workers run, when one may have written it already).
  void remove_failure_files() {
    std::error_code ignored;
    fs::remove(paths_.output + "/failure", ignored);
    fs::remove(paths_.output_data + "/failure", ignored);
  }

  // Decides whether a start that ended is started again.
  bool restart(const GroupEnd& end) {
    const bool again = start_again(end);
    if (again) remove_failure_files();
    return again;
  }

  bool start_again(const GroupEnd& end) {
    end_start(end);
    if (options_.observer) options_.observer->on_end(end.exit_code != 0);
    if (!end.spawn_error.empty()) return false;
    if (stop_reason_ == StopReason::kInterrupted) {
      if (spot_wait_exceeded()) {
        stop_reason_ = StopReason::kMaxWait;
        return false;
      }
      stop_reason_ = StopReason::kNone;
      db_.transition(job_.id, secondary::kRestarting,
                     "Restarting from the checkpoints in " + paths_.checkpoints);
      return true;
    }
    if (stop_reason_ != StopReason::kNone || end.exit_code == 0) return false;
    ++failures_;
    if (failures_ >= spec_.retry.max_attempts) return false;
    const std::string reason = failure_reason(end);
    output_.clear_progress();
    std::cerr << options_.log_name << ": attempt " << failures_ << " of "
              << spec_.retry.max_attempts << " failed; restarting" << std::endl;
    db_.transition(job_.id, secondary::kRestarting,
                   "Attempt " + std::to_string(failures_) + " of " +
                       std::to_string(spec_.retry.max_attempts) + " failed: " + reason);
    return true;
  }

  void end_start(const GroupEnd&) {
    if (!in_start_) return;
    billable_ += elapsed(start_began_);
    in_start_ = false;
    db_.update_progress(job_.id, progress());
  }

  std::string failure_reason(const GroupEnd& end) const {
    if (!end.spawn_error.empty()) return end.spawn_error;
    if (end.hung_rank >= 0) {
      std::string reason = "rank " + std::to_string(end.hung_rank) + " stopped responding in " +
                           end.hung_operation + ": the other ranks timed out waiting for it (rank " +
                           std::to_string(end.failed_rank) + " " +
                           describe_wait_status(end.failed_wait_status) + ")";
      const std::string where = options_.observer ? options_.observer->diagnosis() : "";
      return where.empty() ? reason : reason + "\n" + where;
    }
    if (!end.failure_detail.empty()) return end.failure_detail;
    std::string head = end.failed_rank >= 0
                           ? "rank " + std::to_string(end.failed_rank) + " " +
                                 describe_wait_status(end.failed_wait_status)
                           : "the group ended with exit code " + std::to_string(end.exit_code);
    std::string refused;
    const std::string file = failure_file(paths_, &refused);
    if (!file.empty()) return head + ": " + file;
    const std::string tail = end.failed_rank >= 0 ? output_.tail(end.failed_rank) : "";
    if (!tail.empty())
      head += "; last lines of logs/rank-" + std::to_string(end.failed_rank) + ".log:\n" + tail;
    return refused.empty() ? head : head + "\n" + refused;
  }

  std::string status_text() const {
    return stop_reason_ == StopReason::kNone ? "Training" : "Stopping";
  }

  // How the job ended, from how its last start did and why it was stopped (records Uploading
  // for a completed one).
  JobEnd end_result(const GroupEnd& end) {
    JobEnd result;
    result.status = status::kStopped;
    result.exit_code = kExitStopped;
    if (end.interrupt_signal != 0) {
      result.secondary = secondary::kStopped;
      result.message = "Stopped: heft train received " + signal_name(end.interrupt_signal);
    } else if (stop_reason_ == StopReason::kStopRequested) {
      result.secondary = secondary::kStopped;
      result.message = "Stopped by heft stop";
    } else if (stop_reason_ == StopReason::kRule) {
      result.secondary = secondary::kStopped;
      result.message = "Stopped by " + rule_message_;
    } else if (stop_reason_ == StopReason::kMaxRuntime) {
      result.secondary = secondary::kMaxRuntimeExceeded;
      result.message = "Stopped: max_runtime_s (" + number_text(spec_.stopping.max_runtime_s) +
                       " s) exceeded";
    } else if (stop_reason_ == StopReason::kMaxWait) {
      result.secondary = secondary::kMaxWaitTimeExceeded;
      result.message = "Stopped: spot max_wait_s (" + number_text(spec_.spot.max_wait_s) +
                       " s) exceeded";
    } else if (stop_reason_ == StopReason::kNoSpace) {
      result.status = status::kFailed;
      result.secondary = secondary::kFailed;
      result.failure_reason = "no space left on the disk of " + paths_.root + " (" + no_space_ +
                              "): free space there, then heft resume " + spec_.name;
      result.message = "Failed: no space left on device";
      result.exit_code = kExitFailed;
    } else if (stop_reason_ == StopReason::kStragglers || end.exit_code != 0) {
      result.status = status::kFailed;
      result.secondary = secondary::kFailed;
      result.failure_reason =
          stop_reason_ == StopReason::kStragglers ? straggler_reason_ : failure_reason(end);
      const std::string& reason = result.failure_reason;
      result.message = "Failed: " + reason.substr(0, reason.find('\n'));
      result.exit_code = kExitFailed;
    } else {
      db_.transition(job_.id, secondary::kUploading,
                     "Keeping the model in " + paths_.model + " (" +
                         std::to_string(count_files(paths_.model)) + " files)");
      result.status = status::kCompleted;
      result.secondary = secondary::kCompleted;
      result.message = "Training job completed";
      result.exit_code = kExitCompleted;
    }
    return result;
  }

  int finish(const GroupEnd& end) {
    remove_temporary_checkpoints();
    JobEnd result;
    try {
      end_start(end);
      // Last samples, step records and rule evaluations (a no-op when restart() saw the end).
      if (options_.observer) options_.observer->on_end(end.exit_code != 0);
      output_.flush_metrics(db_, job_.id);
    } catch (const NoSpace& e) {
      out_of_space(e.what());
    }
    output_.clear_progress();
    result = end_result(end);
    result.progress = progress();
    try {
      db_.finish(job_.id, result);
    } catch (const NoSpace& e) {
      // Even the reserve did not make room: say it here, and let heft jobs find the job's
      // supervisor gone (its record stays InProgress until then).
      std::cerr << options_.log_name << ": cannot record the end of job " << spec_.name
                << ": " << e.what() << std::endl;
    }
    release_space();
    std::cerr << options_.log_name << ": job " << spec_.name << " "
              << heft::job::status_text(result.status, result.secondary) << " after "
              << seconds_text(result.progress.training_seconds) << "; billable "
              << billable_text(result.progress.billable_seconds, job_.instance_count)
              << ", " << attempts_ << " start" << (attempts_ == 1 ? "" : "s") << ", "
              << interruptions_ << " interruption" << (interruptions_ == 1 ? "" : "s")
              << std::endl;
    if (!result.failure_reason.empty()) {
      std::string reason;
      for (char c : result.failure_reason) reason += c == '\n' ? "\n  " : std::string(1, c);
      std::cerr << options_.log_name << ": failure reason: " << reason << std::endl;
    }
    return result.exit_code;
  }

  static size_t count_files(const std::string& dir) {
    std::error_code ec;
    size_t n = 0;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      n += it->is_regular_file(ec) ? 1 : 0;
    return n;
  }

  JobDb& db_;
  JobRecord job_;
  JobSpec spec_;
  JobPaths paths_;
  std::vector<std::string> command_;
  SupervisorOptions options_;
  JobOutput output_;

  Clock::time_point job_start_;
  Clock::time_point start_began_;
  Clock::time_point last_progress_write_ = Clock::now();
  bool in_start_ = false;
  std::optional<double> training_start_;      // the job's first start (the record's)
  std::optional<double> run_training_start_;  // this supervisor's first start
  double training_before_ = 0;                // a resumed job's training seconds
  double billable_ = 0;
  int attempts_ = 0;
  int interruptions_ = 0;
  int failures_ = 0;
  StopReason stop_reason_ = StopReason::kNone;
  std::string rule_message_;  // why a rule stopped the job, and the diagnosis then
  std::string no_space_;      // what failed to write when the disk filled
  std::string reserve_path_;  // the space held back (reserve_space()); "" once given back
  StragglerWatch stragglers_;
  std::string straggler_reason_;  // the failure reason once stragglers were stopped
};

Supervisor::Supervisor(JobDb& db, JobRecord job, JobSpec spec, JobPaths paths,
                       std::vector<std::string> command, SupervisorOptions options)
    : impl_(std::make_unique<Impl>(db, std::move(job), std::move(spec), std::move(paths),
                                   std::move(command), std::move(options))) {}

Supervisor::~Supervisor() = default;

int Supervisor::run() { return impl_->run(); }

}  // namespace heft::job
