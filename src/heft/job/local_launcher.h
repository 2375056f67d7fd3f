// The local launcher: runs hosts x processes_per_host workers of one command on this
// machine, grouped into simulated hosts algo-1..algo-H, and supervises them until they end.
// It serves the job's rendezvous store (TcpStoreServer, fresh random token) for as long as
// the workers run, gives each the environment of worker_env.h, multiplexes their output,
// and stops the whole group when one fails or when it is interrupted. `heft run` is a thin
// command line over it (docs/run.md); `heft bench` uses it to start its ranks.
//
// Deliberately left out: restarts, log files, metrics (the job supervisor does those), and
// hosts other than this machine (the mpirun and ssh launchers).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "heft/job/worker_env.h"

namespace heft::job {

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
  int timeout_s = 300;
  // How long stopped workers get between SIGTERM (or a forwarded SIGINT) and SIGKILL.
  // Shorter loses less time on a hung worker; longer lets workers write their last logs or a
  // checkpoint. Zero sends SIGKILL at once. >= 0.
  std::chrono::milliseconds grace{std::chrono::seconds(5)};
  // true: every line a worker prints becomes "[rank N] line" (stdout lines on our stdout,
  // stderr lines on our stderr; a last line without '\n' is completed at exit). false:
  // workers write straight to our stdout and stderr (a terminal stays a terminal).
  bool prefix_output = true;
  // Added to every worker's environment last: overrides the parent's and heft's variables.
  Environment extra_env;
  // Where the store listens. Loopback keeps it private to this machine.
  std::string store_bind_address = "127.0.0.1";
  // Leads every line the launcher itself writes on stderr ("heft run: rank 2 exited...").
  std::string log_name = "heft run";
};

class LocalLauncher {
 public:
  // Checks the options; throws heft::InvalidArgument naming the first field out of range.
  explicit LocalLauncher(LocalLauncherOptions options);

  // Starts the store and the workers and blocks until every worker has ended and been
  // reaped. Returns the exit code for the whole run:
  //  - 0 when every worker exited 0;
  //  - the first failing worker's code (128 + signal when a signal killed it) after the
  //    others were stopped (SIGTERM to each worker's process group, SIGKILL after `grace`);
  //  - 128 + sig when this process received SIGINT, SIGTERM or SIGHUP: the signal is
  //    forwarded to every worker's group, SIGKILL follows after `grace` (or at once on a
  //    second signal);
  //  - 127 / 126 when the command is not found / not executable (nothing is started).
  // Every failure is explained in one line on stderr. Throws heft::IoError when the store
  // or a process cannot be set up; workers already started are then killed and reaped.
  // While it runs it owns this process's handlers for SIGINT, SIGTERM, SIGHUP, SIGCHLD and
  // SIGPIPE (restored on return): at most one run() at a time per process (heft::Error
  // otherwise). Call from the main thread.
  int run();

 private:
  LocalLauncherOptions options_;
};

}  // namespace heft::job
