// The orphan guard (orphan_guard.h). The guard's side runs in a child forked from a process
// with other threads (the store server's): only async-signal-safe calls until it exits.
// The pipe carries pid_t values: a process group to kill, or 0 for the goodbye.
#include "heft/job/launch/orphan_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "heft/error.h"
#include "heft/job/launch/process.h"

namespace heft::job {

namespace {

// Closes every descriptor but `keep` (moved to 3) and `also` (moved to 4 when >= 0).
bool close_all_but(int keep, int also) {
  // Above 10 first, so that neither move overwrites the other.
  keep = ::fcntl(keep, F_DUPFD, 10);
  if (also >= 0) also = ::fcntl(also, F_DUPFD, 10);
  if (keep < 0 || ::dup2(keep, 3) < 0 || (also >= 0 && ::dup2(also, 4) < 0)) return false;
  const unsigned first = also >= 0 ? 5u : 4u;
  if (::syscall(SYS_close_range, first, ~0u, 0u) != 0)
    for (int fd = static_cast<int>(first); fd < 65536; ++fd) ::close(fd);
  for (int fd = 0; fd < 3; ++fd) ::close(fd);
  return true;
}

[[noreturn]] void guard(int read_fd, int kill_fd) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGUSR1, SIGUSR2})
    ::signal(sig, SIG_IGN);
  if (!close_all_but(read_fd, kill_fd)) ::_exit(1);
  const int fd = 3;
  static pid_t groups[OrphanGuard::kMaxGroups];
  int n = 0;
  pid_t value = 0;
  size_t have = 0;
  for (;;) {
    const ssize_t r = ::read(fd, reinterpret_cast<char*>(&value) + have, sizeof(value) - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // EOF: the launcher is gone without a goodbye
    have += static_cast<size_t>(r);
    if (have < sizeof(value)) continue;
    have = 0;
    if (value == 0) ::_exit(0);  // goodbye
    if (value > 1 && n < OrphanGuard::kMaxGroups) groups[n++] = value;
  }
  if (kill_fd >= 0) {
    ssize_t w = ::write(4, "1", 1);  // the job's cgroup: every member, whatever its group
    (void)w;
  }
  for (int i = 0; i < n; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard(int cgroup_kill_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw IoError("heft: cannot create the orphan guard's pipe: " + errno_string(errno));
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);  // no handler of ours runs in the child
  const pid_t pid = ::fork();
  const int fork_errno = errno;
  if (pid == 0) {
    ::close(fds[1]);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    guard(fds[0], cgroup_kill_fd);
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    throw IoError("heft: cannot fork the orphan guard: " + errno_string(fork_errno));
  }
  pid_ = pid;
  fd_ = fds[1];
  note_spawned(pid);
}

OrphanGuard::~OrphanGuard() {
  const pid_t bye = 0;
  ssize_t ignored = ::write(fd_, &bye, sizeof(bye));
  (void)ignored;
  ::close(fd_);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  note_reaped(pid_);
}

void OrphanGuard::watch(pid_t pgid) {
  if (pgid <= 1) return;
  ssize_t w;
  do {
    w = ::write(fd_, &pgid, sizeof(pgid));
  } while (w < 0 && errno == EINTR);
}

}  // namespace heft::job
