#include "heft/comm/work.h"

namespace heft::comm {

void Work::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::test() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::on_finish(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) {
      on_finish_ = std::move(fn);
      return;
    }
  }
  fn();
}

void Work::finish(std::exception_ptr error) {
  std::function<void()> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
    callback = std::move(on_finish_);
  }
  cv_.notify_all();
  if (callback) callback();
}

}  // namespace heft::comm
