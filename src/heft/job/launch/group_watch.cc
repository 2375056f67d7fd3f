// The group watch loop and the line splitter (group_watch.h).
//
// Terms: a *worker* is one started rank (its Process and its two output streams); a *stop*
// is SIGTERM (or the forwarded signal) to every running worker's process group followed,
// at the *kill deadline* (now + grace), by SIGKILL to those still running.
//
// One thread does everything with poll(): the workers' stdout/stderr pipes and the signal
// pipe, which the handler writes each caught signal number to (SIGCHLD included), so no
// work happens inside the handler.
#include "heft/job/launch/group_watch.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "heft/comm/store/tcp_store.h"
#include "heft/comm/transport/tcp/socket.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/signal_pipe.h"

namespace heft::job {

LineSplitter::LineSplitter(size_t max_line) : max_line_(std::max<size_t>(max_line, 1)) {}

void LineSplitter::feed(std::string_view data, const Sink& sink) {
  while (!data.empty()) {
    // At most the bytes that fill a piece; a '\n' among them ends the line sooner.
    const size_t room = std::min(max_line_ - pending_.size(), data.size());
    const size_t nl = data.substr(0, room).find('\n');
    if (nl != std::string_view::npos) {
      pending_.append(data.data(), nl);
      data.remove_prefix(nl + 1);
    } else {
      pending_.append(data.data(), room);
      data.remove_prefix(room);
      if (pending_.size() < max_line_) continue;
    }
    sink(pending_);
    pending_.clear();
  }
}

void LineSplitter::flush(const Sink& sink) {
  if (pending_.empty()) return;
  sink(pending_);
  pending_.clear();
}

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kReadChunk = 64 * 1024;
// At most this many chunks are read from a finished worker's pipe before it is closed.
constexpr int kMaxDrainChunks = 64;
// poll() wakes at least this often to reap, in case a SIGCHLD byte was dropped.
constexpr int kSafetyPollMillis = 1000;
// After a rank that timed out waiting for a peer fails, how long the others get to time out
// too (and record whom they waited for) before the group is stopped.
constexpr std::chrono::milliseconds kBlameWindow{1000};

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

// One output stream of one worker: each line written as "<prefix>line\n" to out_fd, or
// handed (without its '\n') to a sink when one is given.
class LineWriter {
 public:
  LineWriter(std::string prefix, int out_fd, LineSplitter::Sink sink)
      : prefix_(std::move(prefix)), out_fd_(out_fd), sink_(std::move(sink)) {}

  // Returns false when the destination is broken; the caller then closes the worker's pipe,
  // so the worker sees EPIPE/SIGPIPE as it would writing to the broken fd itself.
  bool feed(const char* data, size_t n) {
    std::string out;
    lines_.feed(std::string_view(data, n), [&](std::string_view line) { deliver(line, out); });
    return out.empty() || write_fully(out_fd_, out.data(), out.size());
  }
  // Completes and writes a last line that had no '\n'.
  void flush() {
    std::string out;
    lines_.flush([&](std::string_view line) { deliver(line, out); });
    if (!out.empty()) write_fully(out_fd_, out.data(), out.size());
  }

 private:
  void deliver(std::string_view line, std::string& out) {
    if (sink_) {
      sink_(line);
      return;
    }
    out += prefix_;
    out += line;
    out.push_back('\n');
  }

  std::string prefix_;
  int out_fd_;
  LineSplitter::Sink sink_;
  LineSplitter lines_;
};

struct Worker {
  int rank = 0;
  Process* process = nullptr;
  LineWriter out;
  LineWriter err;
};

std::string plural(int n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string seconds_text(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// Who hung, from the votes the workers' communicators record when they time out
// ("<group>/timeout/<rank>" = "<peer>\n<operation>"): the rank most waited for among those
// that did not time out themselves (a stopped or deadlocked rank never votes; a rank that
// waited on it in a chain did). rank -1 when nobody voted.
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

// Watches the running workers of one start until all are reaped; see the file comment for
// the terms.
class GroupWatch {
 public:
  // A rank lost in the settle window of an in-place recovery, and its waitpid() status.
  struct Pending {
    Worker* worker;
    int status;
  };

  GroupWatch(const LauncherHooks& hooks, const WatchOptions& options, std::vector<Worker>& workers,
             SignalPipe& signals, const comm::TcpStoreServer& store, const std::string& group)
      : hooks_(hooks), options_(options), workers_(workers), signals_(signals), store_(store),
        group_(group) {}

  GroupEnd run() {
    Clock::time_point next_tick = Clock::now() + hooks_.tick;
    while (running() > 0 || recover_at_) {
      wait_for_events(hooks_.on_tick ? std::optional(next_tick) : std::nullopt);
      for (int sig : signals_.take())
        if (sig != SIGCHLD) on_interrupt(sig);
      reap_exited();
      if (recover_at_ && Clock::now() >= *recover_at_) restart_pending();
      if (kill_deadline_ && Clock::now() >= *kill_deadline_) kill_after_grace();
      if (hooks_.on_tick && Clock::now() >= next_tick && running() > 0) {
        next_tick = Clock::now() + hooks_.tick;
        if (hooks_.on_tick() && !stopping()) {
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
    if (recover_at_) timeout = std::min(timeout, comm::tcp::millis_left(*recover_at_));
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
      LineWriter& writer = stream == 0 ? w.out : w.err;
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
      if (hooks_.on_exit) hooks_.on_exit(w.rank, status);
      if (shell_exit_code(status) == 0 || stopping()) continue;
      if (recover_in_place(w, status)) continue;
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

  // A rank killed by a signal, to be restarted alone (WatchOptions::respawn) once the ranks
  // lost with it are in; false when the group is to stop instead.
  bool recover_in_place(Worker& w, int status) {
    if (!options_.respawn || !WIFSIGNALED(status) ||
        end_.recoveries + static_cast<int>(pending_.size()) >= options_.in_place_recoveries)
      return false;
    if (pending_.empty() && generation_ > 0 && options_.formed && options_.formed() < generation_) {
      std::cerr << options_.log_name << ": rank " << w.rank << " " << describe_wait_status(status)
                << " while the group re-forms generation " << generation_ << "; no in-place recovery" << std::endl;
      return false;
    }
    pending_.push_back(Pending{&w, status});
    if (!recover_at_) recover_at_ = Clock::now() + kRecoverySettle;
    return true;
  }

  // The ranks lost in the settle window, restarted in one generation.
  void restart_pending() {
    recover_at_.reset();
    std::vector<Pending> lost;
    lost.swap(pending_);
    if (stopping()) return;  // a failure came meanwhile: the stop ends them all
    if (running() == 0) {  // every rank was lost: nobody holds a state to rejoin
      std::cerr << options_.log_name << ": every rank was lost; no in-place recovery" << std::endl;
      fail_with(lost.front());
      return;
    }
    for (const Worker& w : workers_)
      if (w.process->reaped() && shell_exit_code(w.process->wait_status()) == 0) {
        // The others are finishing: nobody would rejoin a restarted rank.
        std::cerr << options_.log_name << ": rank " << lost.front().worker->rank << " "
                  << describe_wait_status(lost.front().status) << " after rank " << w.rank
                  << " finished; no in-place recovery" << std::endl;
        fail_with(lost.front());
        return;
      }
    try {
      options_.publish(++generation_);
      group_ = group_.substr(0, group_.rfind("/world")) + "/world.g" + std::to_string(generation_);
      for (Pending& p : lost) {
        p.worker->process = options_.respawn(p.worker->rank, generation_);
        ++end_.recoveries;
        std::cerr << options_.log_name << ": rank " << p.worker->rank << " " << describe_wait_status(p.status)
                  << "; restarted it alone (pid " << p.worker->process->pid()
                  << "), the others rejoin it in generation " << generation_ << " (in-place recovery "
                  << end_.recoveries << " of " << options_.in_place_recoveries << ")" << std::endl;
        if (hooks_.on_recover)
          hooks_.on_recover(p.worker->rank, p.status, static_cast<int>(p.worker->process->pid()), generation_);
      }
    } catch (const std::exception& e) {
      std::cerr << options_.log_name << ": restarting rank " << lost.front().worker->rank
                << " alone failed: " << e.what() << "; stopping the group" << std::endl;
      fail_with(lost.front());
    }
  }

  void fail_with(const Pending& p) {
    first_failure_code_ = shell_exit_code(p.status);
    end_.failed_rank = p.worker->rank;
    end_.failed_wait_status = p.status;
    stop(SIGTERM);
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

  const LauncherHooks& hooks_;
  const WatchOptions& options_;
  std::vector<Worker>& workers_;
  SignalPipe& signals_;
  const comm::TcpStoreServer& store_;
  std::string group_;  // the workers' world communicator ("<HEFT_JOB>/world", then .g<N>)
  GroupEnd end_;
  int interrupt_ = 0;           // the signal that interrupted the run, 0 if none
  int first_failure_code_ = 0;  // exit code of the first failing worker, 0 if none
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> blame_until_;  // a timed-out rank failed; others may vote
  // In-place recovery: the ranks lost in the settle window (restarted at recover_at_), and
  // the generation last published.
  std::vector<Pending> pending_;
  std::optional<Clock::time_point> recover_at_;
  int generation_ = 0;
};

}  // namespace

GroupEnd watch_group(const LauncherHooks& hooks, const WatchOptions& options,
                     std::vector<std::unique_ptr<Process>>& processes, SignalPipe& signals,
                     const comm::TcpStoreServer& store, const std::string& group) {
  std::vector<Worker> workers;
  workers.reserve(processes.size());
  for (size_t r = 0; r < processes.size(); ++r) {
    const int rank = static_cast<int>(r);
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    LineSplitter::Sink out, err;
    if (hooks.on_line) {
      out = [&hooks, rank](std::string_view line) { hooks.on_line(rank, false, line); };
      err = [&hooks, rank](std::string_view line) { hooks.on_line(rank, true, line); };
    }
    workers.push_back(Worker{rank, processes[r].get(), LineWriter(prefix, STDOUT_FILENO, out),
                             LineWriter(prefix, STDERR_FILENO, err)});
  }
  return GroupWatch(hooks, options, workers, signals, store, group).run();
}

}  // namespace heft::job
