// Work: the handle of an asynchronous collective (c10d's Work). The operation runs on the
// communicator's thread; wait() blocks until it finished and rethrows its error.
// Thread-safe. Every operation has its own deadline, so wait() never blocks forever.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>

namespace heft::comm {

class Work {
 public:
  // Blocks until the operation finished; rethrows its exception (heft::PeerLost,
  // heft::Timeout, ...) if it failed. May be called any number of times.
  void wait();
  // True once the operation finished (successfully or not); never blocks or throws.
  bool test();
  // Calls `fn` once the operation has finished: at once, on this thread, if it already has;
  // else on the communicator's thread right after it finishes (after waiters are woken).
  // `fn` must be quick and must not call the communicator (it would run on the thread that
  // serves it). At most one callback per Work.
  void on_finish(std::function<void()> fn);

  // Called by the communicator thread.
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;           // guarded by mu_
  std::exception_ptr error_;    // guarded by mu_
  std::function<void()> on_finish_;  // guarded by mu_
};

}  // namespace heft::comm
