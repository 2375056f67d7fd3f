// Child processes of a launcher: start a command (fork + execve) with a given environment,
// optionally capture its stdout and stderr through pipes, signal it and everything it
// started, and reap it. Each child leads its own process group, so one kill() reaches the
// worker and its own children; each child asks the kernel for SIGKILL when the launcher
// dies (PR_SET_PDEATHSIG), so a SIGKILLed launcher leaves no worker behind.
//
// Deliberately left out: stdin (children read /dev/null), resource limits, a shell
// (argv is executed as given), and line splitting of the output (group_watch.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "heft/error.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

// A command that could not be started. exit_code() is what a shell would return for it:
// 127 when the command is not found, 126 when it is found but cannot be executed. what()
// is "cannot execute 'CMD': <reason>".
class SpawnError : public IoError {
 public:
  SpawnError(const std::string& msg, int exit_code) : IoError(msg), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

struct SpawnOptions {
  // The command and its arguments; argv[0] without a '/' is looked up on the PATH of `env`
  // (else /bin:/usr/bin). Must be non-empty.
  std::vector<std::string> argv;
  // The child's whole environment (nothing is inherited implicitly).
  Environment env;
  // true: stdout and stderr go to pipes read through stdout_fd()/stderr_fd(). false: the
  // child writes straight to this process's stdout and stderr.
  bool capture_output = true;
  // The CPUs the child may run on (sched_setaffinity before execve); empty: this process's.
  std::vector<int> cpus;
  // The child's umask (set before execve); -1: this process's.
  int umask = -1;
  // An open cgroup.procs the child writes "0" to before execve, joining that cgroup with
  // everything it will start (job_cgroup.h); -1: none.
  int cgroup_procs_fd = -1;
  // true: the child gets the job's folders as /opt/ml when `env` has HEFT_OPT_ML=1 (opt_ml.h);
  // a child that cannot is a SpawnError (exit code 126) naming the step that failed.
  bool opt_ml = false;
};

// One started child. Not thread-safe; owned by the thread that spawned it.
class Process {
 public:
  // Starts the command and returns once it runs (execve succeeded). Throws SpawnError when
  // the command is missing or not executable, heft::IoError when fork or pipe fails. Safe
  // to call from a multi-threaded process: the child runs only async-signal-safe calls
  // before execve.
  static std::unique_ptr<Process> spawn(const SpawnOptions& options);

  // A child not yet reaped is SIGKILLed with its group and reaped (blocks until it dies).
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // Non-blocking read ends of the child's stdout / stderr pipes; -1 when not captured or
  // after close_stdout()/close_stderr(). The fds stay owned by this object.
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdout();
  void close_stderr();

  // Sends `sig` to the child's process group (the child and what it started). A no-op once
  // the child is reaped. Returns false when no process received it.
  bool signal_group(int sig);

  // Reaps the child if it has exited, without blocking; returns whether it is reaped (now or
  // earlier). On reaping, anything still running in its process group is SIGKILLed: a
  // finished worker leaves nothing behind.
  bool try_reap();
  bool reaped() const { return reaped_; }
  // The waitpid() status; meaningful once reaped().
  int wait_status() const { return wait_status_; }

 private:
  Process(pid_t pid, int out_fd, int err_fd) : pid_(pid), out_fd_(out_fd), err_fd_(err_fd) {}
  void mark_reaped(int status);

  pid_t pid_;
  int out_fd_;
  int err_fd_;
  bool reaped_ = false;
  int wait_status_ = 0;
};

// What a short command printed and how it ended (run_command).
struct CommandOutput {
  int exit_code = 0;  // shell_exit_code; 124 when the timeout stopped it (as timeout(1))
  std::string out, err;
};

// Runs a short command (a client such as squeue) to its end and collects its output; one
// that outlives `timeout` is SIGKILLed with its group. Throws SpawnError when it cannot start.
CommandOutput run_command(SpawnOptions options, std::chrono::milliseconds timeout);

// The exit code a shell reports for a waitpid() status: the code of a normal exit,
// 128 + the signal number for a child killed by a signal.
int shell_exit_code(int wait_status);

// "exited with code 7" or "was killed by signal 9 (SIGKILL)".
std::string describe_wait_status(int wait_status);

// "SIGINT", "SIGKILL", ...; "signal N" for a number without a name.
std::string signal_name(int sig);

// Field `n` of /proc/PID/stat as proc(5) numbers them (4: the parent's pid, 22: the start
// time in clock ticks since boot), for n >= 3 (the fields after the command's name, which may
// hold spaces and parentheses); "" when the process is gone or has no such field.
std::string proc_stat_field(pid_t pid, int n);

// Whether heft started `pid` (Process::spawn, the orphan guard) and has not reaped it: what
// subreaper.h must never end. Thread-safe.
bool spawned_by_heft(pid_t pid);
// For the few places that fork outside Process::spawn (orphan_guard.cc).
void note_spawned(pid_t pid);
void note_reaped(pid_t pid);

// When process `pid` started, in clock ticks since boot (/proc/PID/stat); -1 when no such
// process runs (a zombie counts as gone). A pid and its start time name one process even
// after the pid is reused.
long long process_start_ticks(pid_t pid);

}  // namespace heft::job
