#include "heft/profile/notify.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>

#include "heft/job/record/job_report.h"

extern char** environ;

namespace heft::profile {

namespace {

using Clock = std::chrono::steady_clock;

std::string seconds_text(double s) { return job::decimal_text(s, 1) + " s"; }

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::microseconds(std::llround(seconds * 1e6));
}

// Writes all of `body` to the non-blocking `fd` before `deadline`; false when the reader
// stopped reading (closed, or full past the deadline).
bool write_all(int fd, const std::string& body, Clock::time_point deadline) {
  size_t done = 0;
  while (done < body.size()) {
    const ssize_t n = ::write(fd, body.data() + done, body.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return false;  // EPIPE: the command does not read stdin
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
  }
  return true;
}

// Reaps `pid` before `deadline`, else kills its group and reaps it; the exit status, or -1
// when it was killed for the timeout.
int reap_until(pid_t pid, Clock::time_point deadline) {
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return status;
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(-pid, SIGKILL);
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return -1;
}

}  // namespace

Status notify_exec(const std::vector<std::string>& argv, const std::string& body, double timeout_s) {
  if (argv.empty()) return Status::failure("notify exec: no command");
  const std::string name = "'" + argv[0] + "'";
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return Status::failure("notify exec " + name + ": pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);  // stdin: the finding
  posix_spawn_file_actions_adddup2(&actions, 2, 1);       // stdout: heft train's stderr
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int err = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[0]);
  if (err != 0) {
    ::close(fds[1]);
    return Status::failure("notify exec " + name + ": cannot execute: " + std::strerror(err));
  }
  const Clock::time_point deadline = deadline_after(timeout_s);
  ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
  {
    // A command that exits without reading its stdin gets EPIPE here, not SIGPIPE: blocked
    // for this thread while it writes, and a SIGPIPE the write raised taken off again.
    sigset_t pipe_signal, old;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, &old);
    write_all(fds[1], body, deadline);  // a command that ignores stdin may still succeed
    const timespec now{0, 0};
    while (::sigtimedwait(&pipe_signal, nullptr, &now) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ::close(fds[1]);
  const int status = reap_until(pid, deadline);
  if (status == -1)
    return Status::failure("notify exec " + name + ": did not finish within " +
                           seconds_text(timeout_s) + " (killed)");
  if (WIFSIGNALED(status))
    return Status::failure("notify exec " + name + ": killed by signal " +
                           std::to_string(WTERMSIG(status)));
  if (WEXITSTATUS(status) != 0)
    return Status::failure("notify exec " + name + ": exited with status " +
                           std::to_string(WEXITSTATUS(status)));
  return Status::success();
}

Status notify_url(const std::string& url, const std::string& body, double timeout_s) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    return Status::failure("notify url " + url + ": expected http://HOST[:PORT][/PATH]");
  const size_t slash = url.find('/', scheme.size());
  const std::string host = url.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  httplib::Client client(host);
  const auto usec = std::chrono::microseconds(std::llround(timeout_s * 1e6));
  client.set_connection_timeout(usec);
  client.set_read_timeout(usec);
  client.set_write_timeout(usec);
  const httplib::Result res = client.Post(path, body, "application/json");
  if (!res)
    return Status::failure("notify url POST " + url + ": " + httplib::to_string(res.error()));
  if (res->status < 200 || res->status >= 300)
    return Status::failure("notify url POST " + url + ": answered HTTP " +
                           std::to_string(res->status));
  return Status::success();
}

Notifier::~Notifier() { wait(); }

void Notifier::wait() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void Notifier::send(const job::NotifyAction& action, const nlohmann::json& finding) {
  if (!action.any()) return;
  const std::string body = finding.dump();
  std::lock_guard<std::mutex> lock(mu_);
  threads_.emplace_back([this, action, body] {
    for (int kind = 0; kind < 2; ++kind) {
      if (kind == 0 && action.exec.empty()) continue;
      if (kind == 1 && action.url.empty()) continue;
      const Status s = kind == 0 ? notify_exec(action.exec, body, action.timeout_s)
                                 : notify_url(action.url, body, action.timeout_s);
      if (s.ok()) {
        ++delivered_;
      } else {
        ++failed_;
        std::cerr << log_name_ << ": " << s.error() << " (the job goes on)" << std::endl;
      }
    }
  });
}

}  // namespace heft::profile
