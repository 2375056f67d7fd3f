// A group of workers started by an outside engine (mpirun, srun) and supervised like the
// local launcher's: the same hooks (every rank's line, ticks that may stop the group, restarts
// with a fresh store and token), the engine's own output tags telling which rank wrote a line.
// Internal to the job layer; mpirun_launcher.h and slurm_launcher.h are its users.
//
// Deliberately left out: worker pids (they run on other hosts: on_start gets none).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "heft/job/local_launcher.h"
#include "heft/job/process.h"

namespace heft::job {

// One start of the group: what to run (the engine and its arguments and environment), and,
// after it ended, what the first rank to see a failure recorded in the store
// (communicator.cc: "<group>/abort" = "<peer>\n<what>"). Owns the store for the start.
class ExternalStart {
 public:
  virtual ~ExternalStart() = default;
  virtual SpawnOptions spawn() const = 0;
  virtual std::optional<std::string> abort_record(const std::string& group) const = 0;
};

struct ExternalLine {
  int rank = -1;
  bool is_stderr = false;
  std::string_view text;
};

struct ExternalGroup {
  int world = 1;
  std::string group;       // the world communicator's name: "<job>/world"
  std::string engine;      // "mpirun", "srun": leads its own lines on our stderr
  std::string log_name;
  std::function<std::unique_ptr<ExternalStart>()> start;
  // A rank's line from the engine's output, or false for the engine's own lines.
  std::function<bool(std::string_view line, ExternalLine* out)> parse;
  std::function<std::string(int rank)> host_of_rank;
};

// Runs starts until one ends and hooks.restart declines (or a signal came). SIGINT, SIGTERM
// and SIGHUP go to the engine (which stops the ranks on every host), SIGKILL after `grace`.
// A failed start whose ranks recorded a lost peer names its host in failure_detail. Once a
// rank recorded a failure, an engine still running `grace` + 5 s later is stopped (mpirun
// hangs in its own abort when a host is unreachable).
GroupEnd run_external_group(const ExternalGroup& g, const LocalLauncherHooks& hooks,
                            std::chrono::milliseconds grace);

// `heft run`'s form: one start, the engine writing straight to our stdout and stderr;
// SIGINT and SIGTERM are passed on to it. Returns its exit code (128 + signal if killed); a
// missing engine is one line on stderr naming `install_hint` and 127.
int run_external_passthrough(const ExternalStart& start, const std::string& log_name,
                             const std::string& install_hint);

}  // namespace heft::job
