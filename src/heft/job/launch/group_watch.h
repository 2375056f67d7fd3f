// The contract every launcher shares (local_launcher.h, mpirun_launcher.h, slurm_launcher.h,
// through external_group.h): a caller hands a launcher LauncherHooks, sees every output line
// and every tick of the group it started, may stop it, decides whether it starts again, and
// gets a GroupEnd saying how each start ended. The job supervisor (supervisor.h) is the
// caller that uses all of it.
//
// Also here, the pieces a launcher watches a group with: LineSplitter (a byte stream into
// lines, for the workers' pipes and for an engine's tagged output) and watch_group(), the
// loop that watches the local worker processes of one start until all are reaped: their
// output, the signals of a SignalPipe (signal_pipe.h), failures, hangs and stop requests.
//
// Deliberately left out: starting workers (the launchers do) and their environment
// (worker_env.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heft::comm {
class TcpStoreServer;
}

namespace heft::job {

class Process;
class SignalPipe;

// How one start of the group ended.
struct GroupEnd {
  int restart_count = 0;  // 0 for the first start, then 1, 2, ...
  // What the launcher returns for this start (LocalLauncher::run says which codes).
  int exit_code = 0;
  // The first worker to fail (a non-zero exit or a signal) and its waitpid() status; -1
  // when none failed (or, under an engine, when the engine did not say which). Exits of
  // workers that were being stopped are not failures.
  int failed_rank = -1;
  int failed_wait_status = 0;
  // The rank the others timed out waiting for, and in which operation ("allreduce(shm,
  // 4096 B)"), when the failure was a hang (their communicators record it; see
  // docs/errors.md); -1 and "" otherwise.
  int hung_rank = -1;
  std::string hung_operation;
  // SIGINT, SIGTERM or SIGHUP received by this process; 0 if none.
  int interrupt_signal = 0;
  // LauncherHooks::on_tick asked to stop the group.
  bool stop_requested = false;
  // The command (or the engine) could not be started (what() of the SpawnError); nothing ran.
  std::string spawn_error;
  // Launchers that know more than an exit status say what happened here (the mpirun
  // launcher: which host was lost); "" otherwise.
  std::string failure_detail;
  // Ranks restarted alone during this start (in-place recovery, WatchOptions::respawn).
  int recoveries = 0;
};

// Called on the launcher's thread (never concurrently); each may be left empty.
// Reads one key of a running start's store (nullopt when absent).
using StorePeek = std::function<std::optional<std::string>(const std::string& key)>;

struct LauncherHooks {
  // Every complete line a worker writes, without its '\n' (from local workers, a line over
  // kMaxLineBytes comes in pieces of that size). When set, lines go here instead of to this
  // process's stdout/stderr.
  std::function<void(int rank, bool is_stderr, std::string_view line)> on_line;
  // Once every worker of a start runs; pids by rank (none when an engine started them on
  // other hosts).
  std::function<void(int restart_count, const std::vector<int>& pids)> on_start;
  // A rank of the running start ended, with its waitpid() status: a local worker once reaped;
  // under an engine, once the rank's worker shim recorded it in the store (worker_shim.h),
  // seen at the next tick. At most once per rank and start; ranks an engine ended without
  // their shim recording it are not reported.
  std::function<void(int rank, int wait_status)> on_exit;
  // A rank killed by a signal was restarted alone (in-place recovery, docs/recovery.md): the
  // new worker's pid and the generation of the world the ranks re-form. Called after on_exit.
  std::function<void(int rank, int wait_status, int pid, int generation)> on_recover;
  // Under an engine: right after on_start, a way to read the start's store (where the ranks'
  // shims publish their system samples, worker_shim.h); an empty one when the start ended.
  // Local starts never call it (their workers are sampled from /proc).
  std::function<void(StorePeek peek)> on_store;
  // About every `tick` while the group runs and while it is being stopped. Returning true
  // stops the group as a failure would: SIGTERM to every worker's process group (to the
  // engine, under one), SIGKILL after the launcher's grace. Ignored once the group is stopping.
  std::function<bool()> on_tick;
  std::chrono::milliseconds tick{200};
  // When a start has ended (not called when this process was interrupted): return true to
  // start the group again, with restart_count + 1 (TORCHELASTIC_RESTART_COUNT), a fresh
  // store and a fresh token, so nothing from the previous start confuses the rendezvous.
  std::function<bool(const GroupEnd&)> restart;
};

// The longest line a local worker's output is split into (longer ones come in pieces).
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Splits a byte stream into lines. A line longer than max_line bytes (its '\n' counted)
// comes in pieces of max_line bytes; "no limit" keeps a line whole however long (an
// engine's lines, whose tag only the first piece would carry).
class LineSplitter {
 public:
  using Sink = std::function<void(std::string_view line)>;
  static constexpr size_t kNoLimit = static_cast<size_t>(-1);

  explicit LineSplitter(size_t max_line = kMaxLineBytes);
  // Hands each line `data` completes to `sink`, without its '\n'; keeps the rest.
  void feed(std::string_view data, const Sink& sink);
  // Hands a last line that had no '\n' to `sink`; nothing when there is none.
  void flush(const Sink& sink);

 private:
  size_t max_line_;
  std::string pending_;
};

// What watch_group() needs of the launcher's options.
struct WatchOptions {
  // Between SIGTERM (or a forwarded signal) and SIGKILL when stopping; zero: SIGKILL at once.
  std::chrono::milliseconds grace{0};
  // Leads every line the watch writes on stderr ("heft run: rank 2 exited ...").
  std::string log_name;
  // In-place recovery (docs/recovery.md): when set, a rank killed by a signal (not stopped by
  // the watch) is restarted alone, at most `in_place_recoveries` times a start, while the others
  // keep running and rejoin it. Ranks lost within kRecoverySettle of each other (a host) are
  // restarted together: `publish(g)` once with the next generation g, then `respawn(rank, g)`
  // for each (the new process, owned by the launcher). A rank that exits with a code, a loss
  // while the previous generation has not formed yet (`formed()` below it), or a publish or
  // respawn that throws stops the group as without it.
  std::function<void(int generation)> publish;
  std::function<Process*(int rank, int generation)> respawn;
  std::function<int()> formed;
  int in_place_recoveries = 0;
};

// How long the watch waits after a rank is lost for others lost with it (in-place recovery).
inline constexpr std::chrono::milliseconds kRecoverySettle{100};

// Watches one start of a local group until every worker is reaped and says how it ended
// (restart_count left 0: the caller's to set). `workers[r]` is rank r, started; when its
// output was captured, each line goes to hooks.on_line, or else to this process's
// stdout/stderr as "[rank r] line" (a destination that broke closes the worker's pipe, so the
// worker sees EPIPE as it would have itself). A failing worker stops the others (SIGTERM to
// each process group, SIGKILL after `grace`); a worker that timed out waiting for a peer
// first gives the others a second to time out too, and the rank they all waited for is
// named from their records in `store` under "<group>/timeout/<rank>" (`group`: the world
// communicator, "<HEFT_JOB>/world"). SIGINT, SIGTERM and SIGHUP taken from `signals` are
// forwarded to every worker's group (a second one kills at once). Every failure is one line
// on stderr.
GroupEnd watch_group(const LauncherHooks& hooks, const WatchOptions& options,
                     std::vector<std::unique_ptr<Process>>& workers, SignalPipe& signals,
                     const comm::TcpStoreServer& store, const std::string& group);

}  // namespace heft::job
