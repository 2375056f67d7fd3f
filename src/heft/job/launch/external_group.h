// A group of workers started by an outside engine (mpirun, srun) and supervised like the
// local launcher's: the same LauncherHooks (group_watch.h: every rank's line, ticks that may
// stop the group, restarts with a fresh store and token), the engine's own output tags
// telling which rank wrote a line.
// Internal to the job layer; mpirun_launcher.h and slurm_launcher.h build on it.
//
// Deliberately left out: worker pids (they run on other hosts: on_start gets none).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "heft/job/launch/group_watch.h"
#include "heft/contract/defaults.h"
#include "heft/job/launch/process.h"

namespace heft::job {

// What a group needs whichever engine starts it (MpirunOptions and SlurmOptions add their
// engine's own).
struct EngineOptions {
  int processes_per_host = 1;
  std::vector<std::string> command;
  // Where the store listens; "": this machine's address toward the first host.
  std::string store_bind_address;
  int timeout_s = contract::kDefaultTimeoutS;     // HEFT_TIMEOUT of every rank
  std::string job_name = "heft";
  std::string python_path;   // first on the workers' PYTHONPATH
  Environment extra_env;     // given to every worker
  std::string heft_binary;   // the heft every rank runs the worker shim of (same path everywhere)
  // How long each worker shim gives its rank between SIGTERM and SIGKILL when it finds the
  // supervisor gone (worker_shim.h; HEFT_STOP_GRACE_MS). The job's stopping.grace_s.
  std::chrono::milliseconds worker_grace{std::chrono::seconds(5)};
  std::string log_name = "heft run";
};

// The variables every rank of a start gets besides extra_env: HEFT_STORE (bind:port),
// HEFT_TOKEN, HEFT_JOB, HEFT_TIMEOUT, HEFT_STOP_GRACE_MS (worker_grace, for the worker
// shim), MASTER_PORT (free at `bind`) and, with a python_path,
// PYTHONPATH = python_path before `pythonpath` (what the workers would have otherwise).
Environment engine_start_variables(const EngineOptions& o, const std::string& bind,
                                   int store_port, const std::string& token,
                                   const std::string& pythonpath);

// Appends what every rank runs to an engine's argument vector: `<heft_binary> <worker> --
// <command...>` (the worker shim maps the engine's variables, then executes the command).
void append_worker_shim(std::vector<std::string>& argv, const EngineOptions& o,
                        const char* worker);

// One start of the group: what to run (the engine and its arguments and environment), and
// what the ranks record in its store: the first rank to see a failure (communicator.cc:
// "<group>/abort" = "<peer>\n<what>") and each rank's end as its worker shim saw it
// ("<group>/exit/<rank>" = the waitpid() status in decimal, worker_shim.h). Owns the store
// for the start.
class ExternalStart {
 public:
  virtual ~ExternalStart() = default;
  virtual SpawnOptions spawn() const = 0;
  // The value of `key` in the start's store now; nothing when unset.
  virtual std::optional<std::string> peek(const std::string& key) const = 0;
  std::optional<std::string> abort_record(const std::string& group) const {
    return peek(group + "/abort");
  }
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
  // One of the engine's own lines naming the first rank that failed and its exit code
  // ("srun: error: n2: task 2: Exited with exit code 5"); may keep state across lines.
  // Empty, or false for other lines.
  std::function<bool(std::string_view line, int* rank, int* exit_code)> rank_exit;
};

// Runs starts until one ends and hooks.restart declines (or a signal came). SIGINT, SIGTERM
// and SIGHUP go to the engine (which stops the ranks on every host), SIGKILL after `grace`.
// Each tick, ranks whose shim recorded their end are handed to hooks.on_exit.
// A failed start whose ranks recorded a lost peer names its host in failure_detail. Once a
// rank recorded a failure, an engine still running `grace` + 5 s later is stopped (mpirun
// hangs in its own abort when a host is unreachable).
GroupEnd run_external_group(const ExternalGroup& g, const LauncherHooks& hooks,
                            std::chrono::milliseconds grace);

// A variable an engine sets for each rank: its value, or heft::InvalidArgument "<NAME> is not
// set: heft <worker> runs under `heft run --launcher <launcher>`". engine_int: a non-negative
// integer, else an error naming the variable and its value.
std::string engine_variable(const Environment& env, const char* name, const char* worker,
                            const char* launcher);
int engine_int(const Environment& env, const char* name, const char* worker,
               const char* launcher);

// `parent` with the environment contract of a rank an engine placed: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (= host), SM_HOSTS (JSON list), SM_CURRENT_HOST and
// HEFT_HOST (hosts[host]), SM_NUM_CPUS, SM_NUM_GPUS, and unless set TORCHELASTIC_RESTART_COUNT
// (0) and OMP_NUM_THREADS (cores / local_size). `host` < hosts.size(), local_size >= 1.
Environment engine_worker_environment(Environment parent, int rank, int size, int local_rank,
                                      int local_size, int host,
                                      const std::vector<std::string>& hosts);

// `heft run`'s form: one start, the engine writing straight to our stdout and stderr;
// SIGINT and SIGTERM are passed on to it. Returns its exit code (128 + signal if killed); a
// missing engine is one line on stderr naming `install_hint` and 127.
int run_external_passthrough(const ExternalStart& start, const std::string& log_name,
                             const std::string& install_hint);

}  // namespace heft::job
