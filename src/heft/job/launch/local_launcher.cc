// The local launcher (local_launcher.h).
//
// Terms: a *worker* is one started rank (its Process and its two output streams); a *stop*
// is SIGTERM (or the forwarded signal) to every running worker's process group followed,
// at the *kill deadline* (now + grace), by SIGKILL to those still running.
//
// One thread does everything with poll(): the workers' stdout/stderr pipes and a self-pipe
// that the signal handler writes each caught signal number to (SIGCHLD included), so no
// work happens inside the handler. The store server's thread is started with these signals
// blocked, so the handler only ever interrupts this thread.
#include "heft/job/launch/local_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <memory>
#include <set>
#include <map>
#include <optional>

#include "heft/comm/auth.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/job/launch/placement.h"
#include "heft/job/launch/process.h"

namespace heft::job {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
constexpr size_t kReadChunk = 64 * 1024;
// A line longer than this is written out in pieces, each with the prefix.
constexpr size_t kMaxLine = 64 * 1024;
// At most this many chunks are read from a finished worker's pipe before it is closed.
constexpr int kMaxDrainChunks = 64;
// poll() wakes at least this often to reap, in case a SIGCHLD byte was dropped.
constexpr int kSafetyPollMillis = 1000;
// After a rank that timed out waiting for a peer fails, how long the others get to time out
// too (and record whom they waited for) before the group is stopped.
constexpr std::chrono::milliseconds kBlameWindow{1000};

// The write end of the self-pipe; -1 when no launcher runs. Process-wide because signal
// handlers are; atomic<int> is lock-free, so the handler may read it.
std::atomic<int> g_signal_pipe{-1};

extern "C" void write_signal_to_pipe(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (fd >= 0) {
    ssize_t ignored = ::write(fd, &byte, 1);
    (void)ignored;
  }
  errno = saved;
}

// Owns the self-pipe and this process's handlers while a launcher runs.
class SignalPipe {
 public:
  SignalPipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw IoError("heft: cannot create the signal pipe: " + errno_string(errno));
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    int expected = -1;
    if (!g_signal_pipe.compare_exchange_strong(expected, write_fd_)) {
      close_pipe();
      throw Error("heft: a local launcher is already running in this process");
    }
    struct sigaction sa {};
    sa.sa_handler = write_signal_to_pipe;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < std::size(kHandledSignals); ++i)
      ::sigaction(kHandledSignals[i], &sa, &old_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ignore, &old_pipe_);  // a closed stdout must not kill the launcher
    // heft may have been started with these blocked (inherited from its parent): unblock
    // them in this thread, or a stop request would never arrive.
    sigset_t handled;
    sigemptyset(&handled);
    for (int sig : kHandledSignals) sigaddset(&handled, sig);
    ::pthread_sigmask(SIG_UNBLOCK, &handled, &old_mask_);
  }
  ~SignalPipe() {
    for (size_t i = 0; i < std::size(kHandledSignals); ++i)
      ::sigaction(kHandledSignals[i], &old_[i], nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    g_signal_pipe.store(-1);
    close_pipe();
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }
  // The signals caught since the last call, in order.
  std::vector<int> take() {
    drain();
    std::vector<int> sigs;
    sigs.swap(pending_);
    return sigs;
  }
  // The first SIGINT, SIGTERM or SIGHUP caught and not yet taken, else 0; takes nothing.
  int pending_interrupt() {
    drain();
    for (int sig : pending_)
      if (sig != SIGCHLD) return sig;
    return 0;
  }

 private:
  void close_pipe() {
    ::close(read_fd_);
    ::close(write_fd_);
  }
  void drain() {
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(read_fd_, buf, sizeof(buf))) > 0) pending_.insert(pending_.end(), buf, buf + n);
  }
  std::vector<int> pending_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction old_[std::size(kHandledSignals)] {};
  struct sigaction old_pipe_ {};
  sigset_t old_mask_ {};
};

// Blocks the handled signals in this thread while alive; threads started meanwhile inherit
// the mask and so never run the handler.
class ScopedSignalBlock {
 public:
  ScopedSignalBlock() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kHandledSignals) sigaddset(&set, sig);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedSignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

// Writes all of data to fd. Returns false when fd is broken (its reader went away).
bool write_fully(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, 100);
    } else if (!(w < 0 && errno == EINTR)) {
      return false;
    }
  }
  return true;
}

using LineSink = std::function<void(std::string_view line)>;

// Splits one output stream of one worker into lines and writes each as "<prefix>line\n",
// or hands each (without its '\n') to a sink when one is given.
class LineWriter {
 public:
  LineWriter(std::string prefix, int out_fd, LineSink sink = {})
      : prefix_(std::move(prefix)), out_fd_(out_fd), sink_(std::move(sink)) {}

  // Returns false when the destination is broken; the caller then closes the worker's pipe,
  // so the worker sees EPIPE/SIGPIPE as it would writing to the broken fd itself.
  bool feed(const char* data, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) {
      pending_.push_back(data[i]);
      if (data[i] == '\n' || pending_.size() >= kMaxLine) {
        if (sink_) {
          if (pending_.back() == '\n') pending_.pop_back();
          sink_(pending_);
        } else {
          out += prefix_;
          out += pending_;
          if (out.back() != '\n') out.push_back('\n');
        }
        pending_.clear();
      }
    }
    return out.empty() || write_fully(out_fd_, out.data(), out.size());
  }
  // Completes and writes a last line that had no '\n'.
  void flush() {
    if (!pending_.empty()) feed("\n", 1);
  }

 private:
  std::string prefix_;
  int out_fd_;
  LineSink sink_;
  std::string pending_;
};

struct Worker {
  int rank = 0;
  std::unique_ptr<Process> process;
  std::optional<LineWriter> out;
  std::optional<LineWriter> err;
};

std::string plural(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// The address workers dial for a store bound to `bind`, as "host:port".
std::string store_address(const std::string& bind, int port) {
  std::string host = bind;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

// Watches the running workers of one start until all are reaped; see the file comment for
// the terms.
// Who hung, from the votes the workers' communicators record when they time out
// ("<group>/timeout/<rank>" = "<peer>\n<operation>"): the rank most waited for among those
// that did not time out themselves (a stopped or deadlocked rank never votes; a rank that
// waited on it in a chain did). Empty when nobody voted.
struct Hung {
  int rank = -1;
  int voter = -1;
  std::string op;
};

Hung find_hung_rank(const comm::TcpStoreServer& store, const std::string& group, int world) {
  std::map<int, int> votes;  // peer -> ranks waiting for it
  std::map<int, std::pair<int, std::string>> example;  // peer -> (a voter, its operation)
  std::set<int> voters;
  for (int r = 0; r < world; ++r) {
    const std::optional<std::string> v = store.peek(group + "/timeout/" + std::to_string(r));
    if (!v) continue;
    const auto nl = v->find('\n');
    const int peer = std::atoi(v->substr(0, nl).c_str());
    if (peer < 0 || peer >= world) continue;
    voters.insert(r);
    ++votes[peer];
    example.emplace(peer, std::make_pair(r, nl == std::string::npos ? "" : v->substr(nl + 1)));
  }
  Hung hung;
  int best = 0;
  for (const auto& [peer, n] : votes) {
    if (voters.count(peer) || n <= best) continue;
    best = n;
    hung.rank = peer;
    hung.voter = example[peer].first;
    hung.op = example[peer].second;
  }
  return hung;
}

class GroupWatch {
 public:
  GroupWatch(const LocalLauncherOptions& options, std::vector<Worker>& workers,
             SignalPipe& signals, const comm::TcpStoreServer& store, std::string group)
      : options_(options), workers_(workers), signals_(signals), store_(store),
        group_(std::move(group)) {}

  GroupEnd run() {
    const LocalLauncherHooks& hooks = options_.hooks;
    Clock::time_point next_tick = Clock::now() + hooks.tick;
    while (running() > 0) {
      wait_for_events(hooks.on_tick ? std::optional(next_tick) : std::nullopt);
      for (int sig : signals_.take())
        if (sig != SIGCHLD) on_interrupt(sig);
      reap_exited();
      if (kill_deadline_ && Clock::now() >= *kill_deadline_) kill_after_grace();
      if (hooks.on_tick && Clock::now() >= next_tick && running() > 0) {
        next_tick = Clock::now() + hooks.tick;
        if (hooks.on_tick() && !stopping()) {
          end_.stop_requested = true;
          stop(SIGTERM);
        }
      }
    }
    end_.interrupt_signal = interrupt_;
    end_.exit_code = interrupt_ != 0 ? 128 + interrupt_
                     : end_.stop_requested && first_failure_code_ == 0 ? 128 + SIGTERM
                                                                        : first_failure_code_;
    return end_;
  }

 private:
  int running() const {
    int n = 0;
    for (const Worker& w : workers_) n += w.process->reaped() ? 0 : 1;
    return n;
  }

  void wait_for_events(std::optional<Clock::time_point> next_tick) {
    std::vector<pollfd> fds{{signals_.fd(), POLLIN, 0}};
    for (const Worker& w : workers_)
      for (int fd : {w.process->stdout_fd(), w.process->stderr_fd()})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    int timeout = kSafetyPollMillis;
    if (kill_deadline_) timeout = std::min(timeout, comm::tcp::millis_left(*kill_deadline_));
    if (next_tick) timeout = std::min(timeout, comm::tcp::millis_left(*next_tick));
    if (blame_until_) timeout = std::min(timeout, comm::tcp::millis_left(*blame_until_));
    if (::poll(fds.data(), fds.size(), std::max(timeout, 0)) <= 0) return;
    for (Worker& w : workers_) read_output(w, false);
  }

  // Copies what a worker's pipes hold now; `to_eof` also flushes and closes them.
  void read_output(Worker& w, bool to_eof) {
    char buf[kReadChunk];
    for (int stream = 0; stream < 2; ++stream) {
      Process& p = *w.process;
      const int fd = stream == 0 ? p.stdout_fd() : p.stderr_fd();
      if (fd < 0) continue;
      LineWriter& writer = stream == 0 ? *w.out : *w.err;
      ssize_t n;
      bool delivered = true;
      int chunks = 0;  // bounds the drain should something outside the group keep writing
      do {
        n = ::read(fd, buf, sizeof(buf));
        if (n > 0) delivered = writer.feed(buf, static_cast<size_t>(n));
      } while ((n > 0 && to_eof && delivered && ++chunks < kMaxDrainChunks) ||
               (n < 0 && errno == EINTR));
      const bool at_end = n == 0 || (n < 0 && errno != EAGAIN) || !delivered;
      if (at_end || to_eof) {
        writer.flush();
        stream == 0 ? p.close_stdout() : p.close_stderr();
      }
    }
  }

  void reap_exited() {
    for (Worker& w : workers_) {
      if (w.process->reaped() || !w.process->try_reap()) continue;
      read_output(w, true);
      const int status = w.process->wait_status();
      if (shell_exit_code(status) == 0 || stopping()) continue;
      first_failure_code_ = shell_exit_code(status);
      end_.failed_rank = w.rank;
      end_.failed_wait_status = status;
      // It timed out waiting for a peer: the others are about to time out too and record
      // whom they waited for. Give them a moment before stopping them, so the rank that
      // everyone waited for (the end of a chain of waits) can be named.
      if (store_.peek(group_ + "/timeout/" + std::to_string(w.rank))) {
        blame_until_ = Clock::now() + kBlameWindow;
        continue;
      }
      report_failure_and_stop();
    }
    if (blame_until_ && (Clock::now() >= *blame_until_ || running() == 0)) {
      blame_until_.reset();
      report_failure_and_stop();
    }
  }

  void report_failure_and_stop() {
    const int status = end_.failed_wait_status;
    std::string line = options_.log_name + ": rank " + std::to_string(end_.failed_rank) + " " +
                       describe_wait_status(status);
    const Hung hung = find_hung_rank(store_, group_, static_cast<int>(workers_.size()));
    if (hung.rank >= 0) {
      end_.hung_rank = hung.rank;
      end_.hung_operation = hung.op;
      line = options_.log_name + ": rank " + std::to_string(hung.rank) +
             " stopped responding in " + hung.op + ": rank " + std::to_string(hung.voter) +
             " timed out waiting for it (rank " + std::to_string(end_.failed_rank) + " " +
             describe_wait_status(status) + ")";
    }
    const int others = running();
    if (others > 0) line += "; stopping the other " + plural(others, "worker");
    std::cerr << line << std::endl;
    stop(SIGTERM);
  }

  void on_interrupt(int sig) {
    const int n = running();
    if (stopping()) {
      if (interrupt_ == 0) interrupt_ = sig;  // no restart after this
      std::cerr << options_.log_name << ": received " << signal_name(sig) << " while stopping; "
                << "killing " << plural(n, "worker") << std::endl;
      kill_remaining();
      return;
    }
    interrupt_ = sig;
    std::cerr << options_.log_name << ": received " << signal_name(sig) << "; stopping "
              << plural(n, "worker") << std::endl;
    stop(sig);
  }

  bool stopping() const {
    return interrupt_ != 0 || first_failure_code_ != 0 || end_.stop_requested;
  }

  void stop(int sig) {
    if (options_.grace.count() <= 0) {
      kill_remaining();
      return;
    }
    for (Worker& w : workers_) w.process->signal_group(sig);
    kill_deadline_ = Clock::now() + options_.grace;
  }

  void kill_after_grace() {
    if (running() > 0)
      std::cerr << options_.log_name << ": " << plural(running(), "worker") << " still running "
                << seconds_text(options_.grace) << " after being stopped; sending SIGKILL"
                << std::endl;
    kill_remaining();
  }

  void kill_remaining() {
    kill_deadline_.reset();
    for (Worker& w : workers_) w.process->signal_group(SIGKILL);
  }

  const LocalLauncherOptions& options_;
  std::vector<Worker>& workers_;
  SignalPipe& signals_;
  const comm::TcpStoreServer& store_;
  const std::string group_;  // the workers' world communicator ("<HEFT_JOB>/world")
  GroupEnd end_;
  int interrupt_ = 0;           // the signal that interrupted the run, 0 if none
  int first_failure_code_ = 0;  // exit code of the first failing worker, 0 if none
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> blame_until_;  // a timed-out rank failed; others may vote
};

// What a worker will see in `name`: extra_env wins over this process's environment (as in
// worker_environment); "" when neither sets it.
std::string worker_variable(const LocalLauncherOptions& options, const Environment& parent,
                            const char* name) {
  if (const auto it = options.extra_env.find(name); it != options.extra_env.end()) return it->second;
  if (const auto it = parent.find(name); it != parent.end()) return it->second;
  return "";
}

// Starts every worker of one start of the group and watches them until all are reaped.
GroupEnd run_once(const LocalLauncherOptions& options, SignalPipe& signals, int restart_count) {
  std::unique_ptr<comm::TcpStoreServer> store;
  JobEnvironment job;
  job.token = comm::random_token();
  {
    ScopedSignalBlock block;  // the store's thread inherits the blocked mask
    store = std::make_unique<comm::TcpStoreServer>(
        comm::TcpStoreServerOptions{options.store_bind_address, 0, job.token});
  }
  job.hosts = options.hosts;
  job.processes_per_host = options.processes_per_host;
  job.master_port = free_port(job.master_addr);
  job.store_address = store_address(options.store_bind_address, store->port());
  job.timeout_s = options.timeout_s;
  job.num_cpus = available_cpus();
  job.restart_count = restart_count;
  job.extra = options.extra_env;
  job.python_path = options.python_path;

  const Environment parent = current_environment();
  const int world = options.hosts * options.processes_per_host;
  const LocalLauncherHooks& hooks = options.hooks;
  std::vector<Worker> workers(world);
  // Every simulated host runs on this machine: place all the workers on its CPUs.
  const Bind bind = parse_bind(worker_variable(options, parent, "HEFT_BIND"));
  const std::vector<std::vector<int>> placement = plan_placement(allowed_cpus(), world, bind);
  for (int rank = 0; rank < world; ++rank) {
    // Ctrl-C or SIGTERM while workers are still being started: start no more; the ones
    // started are killed and reaped as `workers` goes (~Process).
    if (const int sig = signals.pending_interrupt()) {
      std::cerr << options.log_name << ": " << strsignal(sig) << " while starting workers ("
                << rank << " of " << world << " started); stopping them" << std::endl;
      GroupEnd end;
      end.restart_count = restart_count;
      end.interrupt_signal = sig;
      end.exit_code = 128 + sig;
      return end;
    }
    Worker& w = workers[rank];
    w.rank = rank;
    SpawnOptions spawn{options.command, worker_environment(job, rank, parent),
                       options.prefix_output || hooks.on_line != nullptr, placement[rank],
                       options.worker_umask};
    if (!placement[rank].empty()) spawn.env["HEFT_CPUS"] = cpu_list(placement[rank]);
    try {
      w.process = Process::spawn(spawn);
    } catch (const SpawnError& e) {
      std::cerr << options.log_name << ": " << e.what() << std::endl;
      GroupEnd end;
      end.restart_count = restart_count;
      end.exit_code = e.exit_code();
      end.spawn_error = e.what();
      return end;  // ~Process kills and reaps the ranks already started
    }
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    LineSink out, err;
    if (hooks.on_line) {
      out = [&hooks, rank](std::string_view line) { hooks.on_line(rank, false, line); };
      err = [&hooks, rank](std::string_view line) { hooks.on_line(rank, true, line); };
    }
    w.out.emplace(prefix, STDOUT_FILENO, out);
    w.err.emplace(prefix, STDERR_FILENO, err);
  }
  if (hooks.on_start) {
    std::vector<int> pids;
    for (const Worker& w : workers) pids.push_back(static_cast<int>(w.process->pid()));
    hooks.on_start(restart_count, pids);
  }
  // comm::init() names the world group after HEFT_JOB ("heft" when unset or empty).
  const std::string job_name = worker_variable(options, parent, "HEFT_JOB");
  const std::string group = (job_name.empty() ? "heft" : job_name) + "/world";
  GroupEnd end = GroupWatch(options, workers, signals, *store, group).run();
  end.restart_count = restart_count;
  return end;
}

}  // namespace

int free_port(const std::string& address) {
  comm::tcp::Socket probe = comm::tcp::listen_on(address, 0);
  return comm::tcp::local_port(probe);
}

LocalLauncher::LocalLauncher(LocalLauncherOptions options) : options_(std::move(options)) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw InvalidArgument("local launcher: " + what);
  };
  require(options_.hosts >= 1, "hosts must be at least 1, found " +
                                   std::to_string(options_.hosts));
  require(options_.processes_per_host >= 1, "processes_per_host must be at least 1, found " +
                                                std::to_string(options_.processes_per_host));
  require(static_cast<long>(options_.hosts) * options_.processes_per_host <= kMaxWorkers,
          "at most " + std::to_string(kMaxWorkers) + " workers (hosts x processes_per_host), found " +
              std::to_string(static_cast<long>(options_.hosts) * options_.processes_per_host));
  require(!options_.command.empty(), "command must not be empty");
  require(options_.timeout_s >= 1, "timeout_s must be at least 1, found " +
                                       std::to_string(options_.timeout_s));
  require(options_.grace.count() >= 0, "grace must not be negative");
  parse_bind(worker_variable(options_, current_environment(), "HEFT_BIND"));
}

int LocalLauncher::run() { return run_group().exit_code; }

GroupEnd LocalLauncher::run_group() {
  SignalPipe signals;  // held across restarts, so no signal falls between two starts
  for (int restart_count = 0;; ++restart_count) {
    GroupEnd end = run_once(options_, signals, restart_count);
    if (end.interrupt_signal != 0 || !options_.hooks.restart || !options_.hooks.restart(end))
      return end;
  }
}

}  // namespace heft::job
