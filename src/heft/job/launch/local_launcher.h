// The local launcher: runs hosts x processes_per_host workers of one command on this
// machine, grouped into simulated hosts algo-1..algo-H, and supervises them until they end.
// It serves the job's rendezvous store (TcpStoreServer, fresh random token) for as long as
// the workers run, gives each the environment of worker_env.h, multiplexes their output,
// and stops the whole group when one fails or when it is interrupted. Should this process
// die (SIGKILL), the workers die with it (process.h) and so does what they started in their
// process groups (orphan_guard.h). `heft run` is a thin
// command line over it (docs/run.md); `heft bench` uses it to start its ranks.
//
// The job supervisor (supervisor.h) drives it through LauncherHooks (group_watch.h, the
// contract every launcher shares): it sees every output line, may stop the group at any
// tick, and may start it again when it ends.
//
// Deliberately left out: log files, metrics, statuses (the job supervisor does those), and
// hosts other than this machine (the mpirun and ssh launchers).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "heft/job/launch/group_watch.h"
#include "heft/job/launch/worker_env.h"

namespace heft::job {

// The most workers one group may have (a job's instance_count x processes_per_host, `heft
// run`'s --hosts x -n, `heft bench --ranks`): beyond it a launch is refused up front.
constexpr int kMaxWorkers = 1024;

struct LocalLauncherOptions {
  // Simulated hosts and workers on each; ranks are host-major (host h runs ranks
  // h*P .. h*P+P-1). Both >= 1.
  int hosts = 1;
  int processes_per_host = 1;
  // The worker command and its arguments, executed without a shell; argv[0] is looked up on
  // PATH. Non-empty.
  std::vector<std::string> command;
  // Communication timeout handed to workers as HEFT_TIMEOUT, in seconds (>= 1). Not a limit
  // on the run's length.
  int timeout_s = contract::kDefaultTimeoutS;
  // How long stopped workers get between SIGTERM (or a forwarded SIGINT) and SIGKILL.
  // Shorter loses less time on a hung worker; longer lets workers write their last logs or a
  // checkpoint. Zero sends SIGKILL at once. >= 0.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // true: every line a worker prints becomes "[rank N] line" (stdout lines on our stdout,
  // stderr lines on our stderr; a last line without '\n' is completed at exit). false:
  // workers write straight to our stdout and stderr (a terminal stays a terminal).
  bool prefix_output = true;
  // The workers' umask; -1: this process's. `heft` runs with umask 077 (its own files are
  // private) and hands its user's umask here, so the files a user's script writes get the
  // modes the user chose.
  int worker_umask = -1;
  // Added to every worker's environment last: overrides the parent's and heft's variables.
  Environment extra_env;
  // Put first on every worker's PYTHONPATH (JobEnvironment::python_path): heft's Python
  // package directory. Empty: PYTHONPATH untouched.
  std::string python_path;
  // Where the store listens. Loopback keeps it private to this machine.
  std::string store_bind_address = "127.0.0.1";
  // Leads every line the launcher itself writes on stderr ("heft run: rank 2 exited...").
  std::string log_name = "heft run";
  // In-place recovery (docs/recovery.md): a rank killed by a signal is started again alone,
  // in the same store, with HEFT_GENERATION one above the last, and that generation is
  // published under contract::generation_key(HEFT_JOB) for the others, which rejoin it; at
  // most this many times a start (0: off, a lost rank stops the group). The workers get
  // HEFT_RECOVERY=in_place.
  int in_place_recoveries = 0;
  LauncherHooks hooks;
};

// A port nothing listens on at `address` now: torch's own store (MASTER_PORT), which rank 0
// starts; for the mpirun and Slurm launchers free here and so most likely on the first host.
int free_port(const std::string& address);

class LocalLauncher {
 public:
  // Checks the options (at most kMaxWorkers workers); throws heft::InvalidArgument naming
  // the first field out of range.
  explicit LocalLauncher(LocalLauncherOptions options);

  // Starts the store and the workers and blocks until every worker has ended and been
  // reaped. Returns the exit code for the whole run:
  //  - 0 when every worker exited 0;
  //  - the first failing worker's code (128 + signal when a signal killed it) after the
  //    others were stopped (SIGTERM to each worker's process group, SIGKILL after `grace`);
  //  - 128 + sig when this process received SIGINT, SIGTERM or SIGHUP: the signal is
  //    forwarded to every worker's group, SIGKILL follows after `grace` (or at once on a
  //    second signal); while workers are still being started, no more are started and
  //    those started are killed at once;
  //  - 127 / 126 when the command is not found / not executable (nothing is started).
  // Every failure is explained in one line on stderr. Throws heft::IoError when the store
  // or a process cannot be set up; workers already started are then killed and reaped.
  // While it runs it owns this process's handlers for SIGINT, SIGTERM, SIGHUP, SIGCHLD and
  // SIGPIPE (restored on return): at most one run() at a time per process (heft::Error
  // otherwise). Call from the main thread.
  int run();

  // As run(), but says how the last start of the group ended; with hooks.restart, the group
  // may be started several times before it returns.
  GroupEnd run_group();

 private:
  LocalLauncherOptions options_;
};

}  // namespace heft::job
