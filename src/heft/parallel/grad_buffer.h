// What the gradient-communicating strategies share (DDP's buckets, the sharded strategy's
// flat units): a hook that fires once autograd has accumulated a parameter's gradient, and
// an area of a flat buffer shaped as a parameter that can serve as its grad.
#pragma once

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

namespace heft::parallel {

// A post hook for a parameter's gradient accumulator: runs fn after autograd has
// accumulated the parameter's gradient into param.grad() (on the thread running backward).
class GradientReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit GradientReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

// A registered GradientReadyHook; the destructor removes it. Holds the accumulator node
// alive (autograd would otherwise drop it between passes, and the hook with it).
class GradientHookHandle {
 public:
  GradientHookHandle() = default;
  GradientHookHandle(const torch::Tensor& param, std::function<void()> fn)
      : accumulator_(torch::autograd::impl::grad_accumulator(param)) {
    if (accumulator_)
      key_ = accumulator_->add_post_hook(std::make_unique<GradientReadyHook>(std::move(fn)));
  }
  ~GradientHookHandle() { reset(); }
  GradientHookHandle(GradientHookHandle&& o) noexcept
      : accumulator_(std::move(o.accumulator_)), key_(o.key_) {
    o.accumulator_.reset();
  }
  GradientHookHandle& operator=(GradientHookHandle&& o) noexcept {
    if (this != &o) {
      reset();
      accumulator_ = std::move(o.accumulator_);
      key_ = o.key_;
      o.accumulator_.reset();
    }
    return *this;
  }
  GradientHookHandle(const GradientHookHandle&) = delete;
  GradientHookHandle& operator=(const GradientHookHandle&) = delete;
  // False when the parameter has no accumulator (it does not require grad).
  explicit operator bool() const { return accumulator_ != nullptr; }
  void reset() {
    if (accumulator_) accumulator_->del_post_hook(key_);
    accumulator_.reset();
  }

 private:
  std::shared_ptr<torch::autograd::Node> accumulator_;
  uintptr_t key_ = 0;
};

// The `param.numel()` elements of `flat` from `offset` on, shaped (and strided) as param:
// the same strides when param is dense (channels-last stays channels-last), else row-major.
// An alias made with set_(), not an autograd view, so it can become param.grad() (the
// optimizers' zero_grad() detach_()es grads, which views refuse) and nothing is copied.
inline torch::Tensor flat_alias(const torch::Tensor& flat, int64_t offset,
                                const torch::Tensor& param) {
  std::vector<int64_t> strides;
  if (param.is_non_overlapping_and_dense()) {
    strides = param.strides().vec();
  } else {
    strides.assign(param.dim(), 1);
    for (int64_t d = param.dim() - 2; d >= 0; --d)
      strides[d] = strides[d + 1] * std::max<int64_t>(param.size(d + 1), 1);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor alias = torch::empty({0}, flat.options());
  alias.set_(flat.storage(), flat.storage_offset() + offset, param.sizes(), strides);
  return alias;
}

}  // namespace heft::parallel
