// The job supervisor: runs one training job, recorded in the job database, from Starting to
// Completed, Failed or Stopped. It drives the local launcher (local_launcher.h) through the
// launchers' hooks (LauncherHooks, group_watch.h):
//  - output: every worker line goes to logs/rank-N.log, through the metric regexes into the
//    database (flushed at least every half second and at the end), and to the terminal as
//    "[rank N] line" under a progress line when stdout is a terminal;
//  - ticks (every 200 ms): a `heft stop` flag in the database, stopping.max_runtime_s (over
//    the attempts' running time), spot.max_wait_s (wall clock) and simulated spot
//    interruptions each stop the group: SIGTERM, stopping.grace_s, SIGKILL;
//  - restarts: after a spot interruption (Interrupted -> Restarting -> Training), and after
//    a failure while retry.max_attempts allows, the group starts again with
//    TORCHELASTIC_RESTART_COUNT raised and the same SM_CHECKPOINT_DIR.
//  - stragglers: once a rank exited 0, ranks still running stopping.straggler_grace_s later
//    are stopped and the job fails (no retry) naming them, with the observer's hang
//    diagnosis and their last log lines (launch/straggler_watch.h).
// A failure's reason is the first failing rank's exit code or signal followed by the
// worker's failure file (SM_OUTPUT_DIR/failure or SM_OUTPUT_DATA_DIR/failure, first 1024
// bytes) or else the last lines of its log. Statuses and exit codes: docs/jobs.md.
//
// With cluster.launcher mpirun or slurm the group runs through mpirun_launcher.h or
// slurm_launcher.h under the same hooks; each rank's worker shim (launch/worker_shim.h) stops
// its rank stopping.grace_s after this process is gone (the local launcher's workers die
// with it at once: process.h).
//
// Deliberately left out: parsing the spec (spec.h), creating the job (job_db.h).
#pragma once

#include <string>
#include <vector>

#include "heft/job/record/job_db.h"
#include "heft/job/job_observer.h"
#include "heft/job/paths.h"
#include "heft/job/spec/spec.h"

namespace heft::job {

// Exit codes of `heft train` (and of Supervisor::run).
inline constexpr int kExitCompleted = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitBadSpec = 2;
inline constexpr int kExitStopped = 3;

struct SupervisorOptions {
  // Leads every line heft itself writes on stderr.
  std::string log_name = "heft train";
  // Worker lines also to this process's stdout/stderr as "[rank N] line".
  bool echo = true;
  // A progress line on stdout, redrawn in place (only sensible on a terminal).
  bool progress = false;
  // The workers' umask (LocalLauncherOptions::worker_umask); -1: this process's.
  int worker_umask = -1;
  // Put first on every worker's PYTHONPATH (LocalLauncherOptions::python_path).
  std::string python_path;
  // The heft binary every rank runs `mpi-worker` / `slurm-worker` of (launchers mpirun, slurm).
  std::string heft_binary;
  // Watches the job (the profiler); may stop it. Not owned; null: none.
  JobObserver* observer = nullptr;
};

class Supervisor {
 public:
  // `job` was created by db.create_job() for `spec` (InProgress/Starting, supervised by this
  // process) and `paths` exist (make_job_dirs). `command` is worker_command(spec, ...).
  Supervisor(JobDb& db, JobRecord job, JobSpec spec, JobPaths paths,
             std::vector<std::string> command, SupervisorOptions options = {});
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Runs the job to its end and records it; returns kExitCompleted, kExitFailed or
  // kExitStopped. Blocks; owns this process's SIGINT/SIGTERM/SIGHUP handlers while it runs
  // (a signal stops the job: Stopped). Throws heft::IoError when the database or a log
  // file fails; the workers are then killed.
  int run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heft::job
