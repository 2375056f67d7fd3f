#include "operation.h"

#include <stdexcept>
#include <string>

namespace heft::torch_backend {

std::exception_ptr backend_error(const std::exception& e) {
  return std::make_exception_ptr(
      std::runtime_error(std::string("heft (backend of torch.distributed): ") + e.what()));
}

void Operation::settle(std::exception_ptr error) {
  if (!error) {
    try {
      finish();
    } catch (const std::exception& e) {
      error = backend_error(e);
    }
  }
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = error;
    f = future_;
  }
  settled_.notify_all();
  // Outside the lock: completing a future runs its callbacks (a comm hook's then() takes
  // the GIL). A future made after the lock was let go is completed by future() itself.
  if (f) complete_future(f);
}

void Operation::complete_future(const c10::intrusive_ptr<c10::ivalue::Future>& f) {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
  }
  if (error)
    f->setError(error);
  else
    f->markCompleted(c10::IValue(outputs));
}

c10::intrusive_ptr<c10::ivalue::Future> Operation::future() {
  static const c10::TypePtr kTensorList = c10::ListType::create(c10::TensorType::get());
  c10::intrusive_ptr<c10::ivalue::Future> f;
  bool settled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(kTensorList);
    f = future_;
    settled = done_;
  }
  if (settled) complete_future(f);  // settle() ran before there was a future to complete
  return f;
}

bool Operation::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

std::exception_ptr Operation::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_ ? error_ : nullptr;
}

void Operation::wait_done() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::unique_lock<std::mutex> lock(mu_);
    settled_.wait(lock, [&] { return done_; });
    f = future_;
  }
  if (f) f->wait();  // completed by settle() or future(), right after done_
}

void Operation::reset() {
  issue = nullptr;
  work.reset();
  finish = nullptr;
  outputs.clear();  // keeps its capacity
  staged = Staged{};
  reduce = comm::ReduceOp::sum;
  waiter = false;
  claimed = false;
  direct = false;
  std::lock_guard<std::mutex> lock(mu_);
  done_ = false;
  error_ = nullptr;
  future_.reset();
}

void Operation::complete(std::atomic<int64_t>& by) {
  std::exception_ptr error;
  try {
    if (work) work->wait();
  } catch (const std::exception& e) {
    error = backend_error(e);
  }
  if (claimed.exchange(true)) return;
  ++by;
  settle(error);
}

void Operation::run_here(comm::Communicator& c) {
  std::exception_ptr error;
  try {
    issue(c, true);
  } catch (const std::exception& e) {
    error = backend_error(e);
  }
  claimed = true;
  settle(error);
}

void Operation::fail(std::exception_ptr error) {
  if (!claimed.exchange(true)) settle(error);
}

bool HeftWork::isCompleted() {
  deferred_->flush();
  return op_->done();
}

bool HeftWork::isSuccess() const {
  deferred_->flush();
  return op_->done() && !op_->error();
}

std::exception_ptr HeftWork::exception() const {
  deferred_->flush();
  return op_->error();
}

bool HeftWork::wait(std::chrono::milliseconds /*timeout*/) {
  WithoutGil no_gil;
  op_->waiter = true;
  if (comm::Communicator* c = deferred_->take(op_)) {
    const uint64_t inline_before = c->inline_operations();
    op_->run_here(*c);
    if (c->inline_operations() > inline_before) ++completions_->on_caller;
    deferred_->release();
    ++completions_->by_waiter;
  } else {
    op_->complete(completions_->by_waiter);
  }
  op_->wait_done();
  if (std::exception_ptr error = op_->error()) std::rethrow_exception(error);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> HeftWork::getFuture() {
  // Without the GIL: a C++ caller (DDP's reducer, from autograd's thread); with it,
  // Python (a comm hook), whose then() callbacks take the GIL: never on the
  // communicator's thread.
  if (deferred_->direct && !(Py_IsInitialized() && PyGILState_Check())) op_->direct = true;
  // Made before the operation is issued: its completer completes it.
  c10::intrusive_ptr<c10::ivalue::Future> f = op_->future();
  deferred_->flush();
  return f;
}

}  // namespace heft::torch_backend
