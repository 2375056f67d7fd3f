// How a launcher learns of signals without doing work in a signal handler: while a SignalPipe
// lives, SIGINT, SIGTERM, SIGHUP and SIGCHLD are caught by a handler that only writes the
// signal's number to a non-blocking self-pipe, whose read end the launcher polls beside its
// workers' output; SIGPIPE is ignored (a closed stdout must not kill the launcher). The
// previous handlers and signal mask come back when it goes.
//
// One per process at a time: the handler is process-wide. Threads that must never run the
// handler (the store server's) are started under a ScopedSignalBlock.
//
// Deliberately left out: signals other than the four above, and signalfd (its mask would
// have to cover every thread, including those a user's library starts).
#pragma once

#include <signal.h>

#include <iterator>
#include <vector>

namespace heft::job {

// The signals a SignalPipe catches.
inline constexpr int kLauncherSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};

class SignalPipe {
 public:
  // Installs the handlers and unblocks the signals in the calling thread (heft may have been
  // started with them blocked, inherited from its parent). Throws heft::IoError when the
  // pipe cannot be made, heft::Error when another SignalPipe lives in this process.
  SignalPipe();
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The read end, to poll() for POLLIN.
  int fd() const { return read_fd_; }
  // The signals caught since the last call, in the order they came.
  std::vector<int> take();
  // The first SIGINT, SIGTERM or SIGHUP caught and not yet taken, else 0; takes nothing.
  int pending_interrupt();

 private:
  void close_pipe();
  void drain();

  std::vector<int> pending_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct sigaction old_[std::size(kLauncherSignals)] {};
  struct sigaction old_pipe_ {};
  sigset_t old_mask_ {};
};

// Blocks kLauncherSignals in the calling thread while alive: threads started meanwhile
// inherit the mask and so never run the handler.
class ScopedSignalBlock {
 public:
  ScopedSignalBlock();
  ~ScopedSignalBlock();
  ScopedSignalBlock(const ScopedSignalBlock&) = delete;
  ScopedSignalBlock& operator=(const ScopedSignalBlock&) = delete;

 private:
  sigset_t old_;
};

}  // namespace heft::job
