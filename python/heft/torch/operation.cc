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
  if (error)
    future->setError(error);
  else
    future->markCompleted(c10::IValue(outputs));
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
  if (!claimed.exchange(true)) future->setError(error);
}

bool HeftWork::isCompleted() {
  deferred_->flush();
  return op_->future->completed();
}

bool HeftWork::isSuccess() const {
  deferred_->flush();
  return op_->future->completed() && !op_->future->hasError();
}

std::exception_ptr HeftWork::exception() const {
  deferred_->flush();
  return op_->future->completed() && op_->future->hasError() ? op_->future->exception_ptr()
                                                             : nullptr;
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
  op_->future->wait();
  if (op_->future->hasError()) std::rethrow_exception(op_->future->exception_ptr());
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> HeftWork::getFuture() {
  // Without the GIL: a C++ caller (DDP's reducer, from autograd's thread); with it,
  // Python (a comm hook), whose then() callbacks take the GIL: never on the
  // communicator's thread.
  if (deferred_->direct && !(Py_IsInitialized() && PyGILState_Check())) op_->direct = true;
  deferred_->flush();
  return op_->future;
}

}  // namespace heft::torch_backend
