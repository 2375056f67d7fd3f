// The trainer's optimizers and learning-rate schedule.
//
//  sgd:   torch::optim::SGD with momentum and (L2) weight_decay
//  adamw: torch::optim::AdamW with decoupled weight_decay, betas (beta1, beta2), default eps
// Schedule: the peak rate is lr, times the world size when scale_lr (the linear scaling
// rule for a global batch that grows with the ranks); during the first warmup_steps steps
// it rises linearly, step s (0-based) using peak * (s + 1) / warmup_steps; then it stays
// (schedule "constant") or follows a half cosine from the peak down to 0 at total_steps
// (schedule "cosine": peak * (1 + cos(pi * (s - warmup) / (total - warmup))) / 2).
// Deliberately left out: step decay, restarts, a floor above 0.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace heft::train {

struct OptimizerConfig {
  std::string name = "sgd";  // sgd | adamw
  double lr = 0.01;          // peak, already scaled
  double momentum = 0.9;
  double weight_decay = 0.0;
  int64_t warmup_steps = 0;
  std::string schedule = "constant";  // constant | cosine
  int64_t total_steps = 0;            // steps of the whole run (cosine only)
  double beta1 = 0.9, beta2 = 0.999;  // adamw
  bool decay_matrices_only = false;   // weight_decay on parameters of 2+ dimensions only
};

// Throws heft::InvalidArgument for an unknown name or schedule. With decay_matrices_only the
// parameters of fewer than 2 dimensions (biases, LayerNorm) form a second group without
// weight decay.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> parameters);
// The groups given: `decayed` with weight_decay, `not_decayed` (may be empty) without. For
// flat shards, which have lost their parameters' dimensions.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& config,
                                                        std::vector<torch::Tensor> decayed,
                                                        std::vector<torch::Tensor> not_decayed);

// The rate for 0-based step `step` under the schedule above.
double learning_rate(const OptimizerConfig& config, int64_t step);

// The sum of squares of `grad`'s elements, for the gradient clip: norms of 4096-element rows
// in place, their squares summed in double (1e-8 of the float64 sum), no tensor-sized copy. It
// was a copy to float64 squared into another (two tensor-sized float64 temporaries at the
// clip's peak; 28-31 ms a step for a 17 MB vocabulary head on the Zen 5 VM, now 0.5 ms).
double squared_norm(const torch::Tensor& grad);

// Sets every parameter group's rate.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace heft::train
