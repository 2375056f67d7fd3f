// The signal self-pipe (signal_pipe.h).
#include "heft/job/launch/signal_pipe.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "heft/error.h"

namespace heft::job {

namespace {

// The write end of the self-pipe; -1 when no SignalPipe lives. Process-wide because signal
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

sigset_t launcher_signal_set() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kLauncherSignals) sigaddset(&set, sig);
  return set;
}

}  // namespace

SignalPipe::SignalPipe() {
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
  for (size_t i = 0; i < std::size(kLauncherSignals); ++i)
    ::sigaction(kLauncherSignals[i], &sa, &old_[i]);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe_);
  const sigset_t handled = launcher_signal_set();
  ::pthread_sigmask(SIG_UNBLOCK, &handled, &old_mask_);
}

SignalPipe::~SignalPipe() {
  for (size_t i = 0; i < std::size(kLauncherSignals); ++i)
    ::sigaction(kLauncherSignals[i], &old_[i], nullptr);
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  g_signal_pipe.store(-1);
  close_pipe();
}

std::vector<int> SignalPipe::take() {
  drain();
  std::vector<int> sigs;
  sigs.swap(pending_);
  return sigs;
}

int SignalPipe::pending_interrupt() {
  drain();
  for (int sig : pending_)
    if (sig != SIGCHLD) return sig;
  return 0;
}

void SignalPipe::close_pipe() {
  ::close(read_fd_);
  ::close(write_fd_);
}

void SignalPipe::drain() {
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(read_fd_, buf, sizeof(buf))) > 0) pending_.insert(pending_.end(), buf, buf + n);
}

ScopedSignalBlock::ScopedSignalBlock() {
  const sigset_t set = launcher_signal_set();
  ::pthread_sigmask(SIG_BLOCK, &set, &old_);
}

ScopedSignalBlock::~ScopedSignalBlock() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

}  // namespace heft::job
