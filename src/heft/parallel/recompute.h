// Activation checkpointing: run f(x) without keeping its activations, and run it again
// during backward to get its gradients (compute for memory). The parameters f uses must be
// passed: their gradients leave through this node, so they reach the parameters' gradient
// accumulators in the outer backward pass (the hooks of DDP and of sharded data parallel
// fire as without recomputation). f must be deterministic (no dropout) and must not
// change state.
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/custom_class.h>
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace heft::parallel {

namespace detail {

// What backward needs besides the saved input, carried in the context as a capsule.
struct RecomputeState : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> f;
  std::vector<torch::Tensor> params;
  bool x_grad = false;
};

struct Recompute : public torch::autograd::Function<Recompute> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                torch::Tensor x,
                                                c10::intrusive_ptr<RecomputeState> state,
                                                torch::TensorList /*params: edges only*/) {
    ctx->save_for_backward({x});
    state->x_grad = x.requires_grad();
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return {state->f(x)};  // grad mode is off inside forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto state = c10::static_intrusive_pointer_cast<RecomputeState>(
        ctx->saved_data["state"].toCapsule());
    torch::Tensor x = ctx->get_saved_variables()[0].detach();
    x.requires_grad_(state->x_grad);
    torch::Tensor out;
    {
      torch::AutoGradMode on(true);
      out = state->f(x);
    }
    std::vector<torch::Tensor> inputs;
    if (state->x_grad) inputs.push_back(x);
    for (const torch::Tensor& p : state->params) inputs.push_back(p);
    std::vector<torch::Tensor> g =
        torch::autograd::grad({out}, inputs, {grads[0]}, /*retain_graph=*/false,
                              /*create_graph=*/false, /*allow_unused=*/true);
    torch::autograd::variable_list result;
    size_t k = 0;
    result.push_back(state->x_grad ? g[k++] : torch::Tensor());
    result.push_back(torch::Tensor());  // state
    for (size_t i = 0; i < state->params.size(); ++i) result.push_back(g[k++]);
    return result;
  }
};

}  // namespace detail

// f(x), its activations recomputed in backward; `params` are the parameters f uses.
inline torch::Tensor recompute_in_backward(const torch::Tensor& x,
                                           std::function<torch::Tensor(const torch::Tensor&)> f,
                                           const std::vector<torch::Tensor>& params) {
  if (!torch::GradMode::is_enabled()) return f(x);
  auto state = c10::make_intrusive<detail::RecomputeState>();
  state->f = std::move(f);
  state->params = params;
  return detail::Recompute::apply(x, state, torch::TensorList(params))[0];
}

}  // namespace heft::parallel
