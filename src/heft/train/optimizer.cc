#include "heft/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "heft/error.h"

namespace heft::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> parameters) {
  if (!config.decay_matrices_only) return make_optimizer(config, std::move(parameters), {});
  std::vector<torch::Tensor> decayed, rest;
  for (torch::Tensor& p : parameters) (p.dim() >= 2 ? decayed : rest).push_back(std::move(p));
  return make_optimizer(config, std::move(decayed), std::move(rest));
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> decayed,
                                                        std::vector<torch::Tensor> not_decayed) {
  if (config.schedule != "constant" && config.schedule != "cosine")
    throw InvalidArgument("unknown learning-rate schedule '" + config.schedule +
                          "': expected one of constant, cosine");
  const double lr0 = learning_rate(config, 0);
  // One group for the decayed parameters, then one without decay when there are any (an
  // empty group would be refused).
  if (config.name == "sgd") {
    auto options = [&](double wd) {
      return torch::optim::SGDOptions(lr0).momentum(config.momentum).weight_decay(wd);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::move(decayed),
                        std::make_unique<torch::optim::SGDOptions>(options(config.weight_decay)));
    if (!not_decayed.empty())
      groups.emplace_back(std::move(not_decayed),
                          std::make_unique<torch::optim::SGDOptions>(options(0.0)));
    return std::make_unique<torch::optim::SGD>(std::move(groups), options(config.weight_decay));
  }
  if (config.name == "adamw") {
    auto options = [&](double wd) {
      return torch::optim::AdamWOptions(lr0).betas({config.beta1, config.beta2}).weight_decay(wd);
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::move(decayed),
                        std::make_unique<torch::optim::AdamWOptions>(options(config.weight_decay)));
    if (!not_decayed.empty())
      groups.emplace_back(std::move(not_decayed),
                          std::make_unique<torch::optim::AdamWOptions>(options(0.0)));
    return std::make_unique<torch::optim::AdamW>(std::move(groups), options(config.weight_decay));
  }
  throw InvalidArgument("unknown optimizer '" + config.name + "': expected one of sgd, adamw");
}

double learning_rate(const OptimizerConfig& config, int64_t step) {
  if (config.warmup_steps > 0 && step < config.warmup_steps)
    return config.lr * static_cast<double>(std::max<int64_t>(step, 0) + 1) /
           static_cast<double>(config.warmup_steps);
  const int64_t decay_steps = config.total_steps - std::max<int64_t>(config.warmup_steps, 0);
  if (config.schedule != "cosine" || decay_steps <= 0) return config.lr;
  const double progress = std::min(
      1.0, static_cast<double>(step - std::max<int64_t>(config.warmup_steps, 0)) / decay_steps);
  return config.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

double squared_norm(const torch::Tensor& grad) {
  // Rows of 4096 elements: each row's norm in the gradient's dtype (an error of about 1e-7 of
  // a row), the rows' squares summed in double. One norm over the whole tensor accumulates in
  // float over millions of elements: 1.6e-4 off for a 4.2M-element gradient, against 1.3e-8
  // for the rows (both 0.5 ms, the float64 copy 28-31 ms).
  constexpr int64_t kRow = 4096;
  const torch::Tensor flat = grad.reshape({-1});  // a view of a contiguous gradient
  const int64_t rows = flat.numel() / kRow, tail = flat.numel() - rows * kRow;
  double sq = 0;
  if (rows > 0)
    sq = flat.narrow(0, 0, rows * kRow).view({rows, kRow}).norm(2, {1}).to(torch::kDouble).square().sum().item<double>();
  if (tail > 0) sq += flat.narrow(0, rows * kRow, tail).to(torch::kDouble).square().sum().item<double>();
  return sq;
}

}  // namespace heft::train
