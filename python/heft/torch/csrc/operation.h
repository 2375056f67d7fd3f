// The operations of heft's torch.distributed process group (process_group.h): one
// operation's call and completion (Operation), the group's operation not issued yet
// (Deferred), which completer completed them (Completions) and the Work torch sees
// (HeftWork). process_group.h's file comment tells how they move.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include <optional>

#include "heft/comm/communicator.h"
#include "staging.h"

namespace heft::torch_backend {

// A std::runtime_error for torch with `e`'s message, prefixed with the backend's name.
std::exception_ptr backend_error(const std::exception& e);

// Which completer completed a group's operations (tests read it: the waiter's path ran).
struct Completions {
  std::atomic<int64_t> by_waiter{0};
  std::atomic<int64_t> by_thread{0};
  std::atomic<int64_t> on_caller{0};  // of by_waiter: run inline on the caller's thread
  std::atomic<int64_t> direct{0};     // by the communicator's thread (C++ futures, DDP's)
  std::atomic<int64_t> at_once{0};    // issued at once, not held (Deferred::immediate)
};

// One operation: its call on the communicator (`issue`; `work` once issued asynchronously),
// what turns its result into the caller's tensors (`finish`, which owns every staged buffer
// the call uses) and its completion. Completed exactly once, by whichever claims it first: a
// caller in wait() (running it itself when it was still deferred), or the group's
// completion thread, to which the communicator hands the operation when it finishes with
// no waiter (on a busy machine every hand-off costs a wake-up, so a waiter's operation
// takes none). The future torch sees is made only when asked for (future()): a synchronous
// call completes without one. Operations are reused (Deferred::acquire): a synchronous
// all_reduce allocates nothing here once the group has run one.
struct Operation {
  std::function<std::shared_ptr<comm::Work>(comm::Communicator&, bool)> issue;  // an IssueFn
  std::shared_ptr<comm::Work> work;  // set once issued asynchronously, under Deferred::mu
  std::function<void()> finish;
  std::vector<at::Tensor> outputs;
  // The one staged tensor of an all_reduce, held here: its issue and finish capture only
  // the operation (they fit std::function's own storage: no allocation).
  Staged staged;
  comm::ReduceOp reduce = comm::ReduceOp::sum;
  std::atomic<bool> waiter{false};   // a caller is in wait()
  std::atomic<bool> claimed{false};  // someone completes it
  // Its future was taken by C++ (no GIL held: DDP's reducer), so completing it runs no
  // Python: the communicator's thread completes it as it finishes (no hand-off).
  std::atomic<bool> direct{false};

  // Records the outcome: `error`, or the outputs after finish() (which may fail); wakes
  // wait_done() and completes the future if one was made. Once per use.
  void settle(std::exception_ptr error);
  // Blocks until the asynchronous call finished; settles it unless the other completer has
  // claimed it (then it settles there, soon after), counting it in `by` first (so a count
  // read after it settled includes it). Never throws.
  void complete(std::atomic<int64_t>& by);
  // Runs the (never issued) call with the communicator's blocking form on this thread and
  // settles it. Never throws.
  void run_here(comm::Communicator& c);
  // The asynchronous issue failed: nothing runs; it settles with the error.
  void fail(std::exception_ptr error);

  // The future torch sees: made on the first call, completed at once if already settled.
  c10::intrusive_ptr<c10::ivalue::Future> future();
  bool done() const;
  std::exception_ptr error() const;  // null unless it settled with an error
  // Blocks until it settled; then waits for a future made meanwhile to be completed too.
  void wait_done();
  // Back to a fresh operation (reuse): drops the tensors, the calls and the future.
  void reset();

 private:
  // Completes `f` with this operation's outcome (settled).
  void complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& f);

  mutable std::mutex mu_;
  std::condition_variable settled_;
  bool done_ = false;                                // guarded by mu_
  std::exception_ptr error_;                         // guarded by mu_
  c10::intrusive_ptr<c10::ivalue::Future> future_;   // guarded by mu_
};

// The group's operation not issued yet (at most one: a later one issues it first), shared
// with the group's Works. A waiter takes its own to run it on its thread; everything else
// issues it asynchronously (`issue_async`, the group's). Closed by shut_down(): then it
// holds nothing and never will.
struct Deferred {
  std::mutex mu;
  std::condition_variable idle;       // `running` went back to 0
  std::shared_ptr<Operation> op;      // guarded by mu
  uint64_t seq = 0;                   // operations deferred so far; guarded by mu
  int running = 0;                    // waiters running theirs right now; guarded by mu
  comm::Communicator* comm = nullptr;  // null once closed; guarded by mu
  bool direct = true;  // futures taken by C++ complete on the communicator's thread
  // Operations to issue at once instead of holding them (guarded by mu): set when one was
  // held until the next operation or the tick, i.e. its caller went on without waiting
  // (async_op=True, waited later: holding it would only delay its start).
  // A caller that issued another operation shows it for sure; one held until the tick may
  // also be a synchronous caller the machine descheduled for a few ms: fewer then.
  int immediate = 0;
  static constexpr int kImmediateOps = 64;
  static constexpr int kImmediateOpsAfterTick = 8;
  std::function<void(const std::shared_ptr<Operation>&)> issue_async;  // guarded by mu

  // Operations for reuse: a Work whose operation nobody else holds any more returns it
  // here (recycle), and the next submit takes it (acquire) instead of allocating one.
  std::mutex pool_mu;
  std::vector<std::shared_ptr<Operation>> pool;  // guarded by pool_mu; reserved up front
  static constexpr size_t kPoolSize = 16;
  std::atomic<int64_t> reused{0};  // operations taken from the pool (tests: the path ran)

  Deferred() { pool.reserve(kPoolSize); }
  std::shared_ptr<Operation> acquire() {
    {
      std::lock_guard<std::mutex> lock(pool_mu);
      if (!pool.empty()) {
        std::shared_ptr<Operation> o = std::move(pool.back());
        pool.pop_back();
        reused.fetch_add(1, std::memory_order_relaxed);
        return o;
      }
    }
    return std::make_shared<Operation>();
  }
  // `o` back to the pool, reset, when the caller's is its last reference; else just let go.
  void recycle(std::shared_ptr<Operation>& o) {
    if (!o || o.use_count() != 1) return;
    o->reset();  // drops tensors: before taking the lock
    std::lock_guard<std::mutex> lock(pool_mu);
    if (pool.size() < kPoolSize) pool.push_back(std::move(o));
  }

  // Issues the deferred operation, if any, asynchronously; returns it, for the caller to
  // drop after unlocking (dropping a tensor may take the GIL).
  std::shared_ptr<Operation> flush_locked() {
    std::shared_ptr<Operation> o = std::move(op);
    op.reset();
    if (o) issue_async(o);
    return o;
  }
  void flush() {
    std::shared_ptr<Operation> o;
    std::lock_guard<std::mutex> lock(mu);
    o = flush_locked();
  }
  // `o` if it is still the deferred operation: taken, with the communicator to run it on
  // (release() after); else null.
  comm::Communicator* take(const std::shared_ptr<Operation>& o) {
    std::lock_guard<std::mutex> lock(mu);
    if (op != o || !comm) return nullptr;
    op.reset();
    ++running;
    return comm;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu);
      --running;
    }
    idle.notify_all();
  }
};

// One operation's call on the communicator: the blocking form (true: returns null) or the
// asynchronous one.
using IssueFn = std::function<std::shared_ptr<comm::Work>(comm::Communicator&, bool)>;

// The IssueFn of one communicator call with `args` (copied): the blocking form Block, or the
// `_async` form Async.
template <auto Block, auto Async, class... A>
IssueFn call(A... args) {
  return [args...](comm::Communicator& c, bool blocking) -> std::shared_ptr<comm::Work> {
    if (!blocking) return (c.*Async)(args...);
    (c.*Block)(args...);
    return nullptr;
  };
}

// Lets go of the GIL while it lives, when this thread holds it (no allocation).
struct WithoutGil {
  std::optional<pybind11::gil_scoped_release> release;
  WithoutGil() {
    if (Py_IsInitialized() && PyGILState_Check()) release.emplace();
  }
};

// The Work torch sees for one operation: wait() runs a still-deferred operation on the
// caller's thread (GIL released) or waits for its completion; the others flush the deferred
// operation first, so that what they report can change.
class HeftWork : public c10d::Work {
 public:
  HeftWork(std::shared_ptr<Operation> op, c10d::OpType type, std::shared_ptr<Deferred> deferred,
           std::shared_ptr<Completions> completions)
      : c10d::Work(-1, type),
        op_(std::move(op)),
        deferred_(std::move(deferred)),
        completions_(std::move(completions)) {}
  // Returns the operation for reuse when this Work held its last reference.
  ~HeftWork() override { deferred_->recycle(op_); }
  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  // The timeout is not used: every operation has the group's deadline.
  bool wait(std::chrono::milliseconds timeout) override;
  void synchronize() override {}
  std::vector<at::Tensor> result() override { return op_->outputs; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::shared_ptr<Operation> op_;
  std::shared_ptr<Deferred> deferred_;
  std::shared_ptr<Completions> completions_;
};

}  // namespace heft::torch_backend
