// The small GPT the train tests run everywhere (strategy_test, gpt_sharded_test): its
// hyperparameters, the distribution heft-train resolves from them, and one rank's (or one
// process's) whole stack: mesh, text task, model, the job's optimizer and strategy.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>

#include "heft/train/strategy.h"
#include "heft/train/text.h"

namespace heft::train::train_test {

// The distribution heft-train runs with these hyperparameters and no spec block.
inline config::Distribution resolved(const Hyperparameters& hp) {
  // A named default rather than a temporary: GCC 12 at -O3 warns (maybe-uninitialized, a
  // false positive) on the temporary's vector members.
  static const config::Distribution none;
  config::Distribution out = none.with_overrides(hp).value();
  return out;
}

inline bool corpus_installed() {
  return std::filesystem::exists(std::string(kDefaultFortunesDir) + "/fortunes");
}

inline Hyperparameters small_gpt() {
  Hyperparameters hp;
  hp.model = "gpt";
  apply_model_defaults(hp, {"model"});
  hp.data = kDefaultFortunesDir;
  hp.n_layer = 3;
  hp.n_head = 4;
  hp.n_embd = 32;
  hp.block_size = 16;
  hp.batch_size = 8;
  hp.warmup_steps = 2;
  hp.lr = 3e-3;
  hp.seed = 5;
  return hp;
}

// One process's (or one rank's) GPT run with the text task and the job's optimizer.
struct GptStack {
  GptStack(comm::Communicator& world, const Hyperparameters& hp)
      : mesh(world, mesh_shape(resolved(hp), world.size())),
        task(make_task("text", hp, "", mesh.coordinate(parallel::Dim::kData),
                       mesh.size(parallel::Dim::kData))) {
    torch::manual_seed(static_cast<uint64_t>(hp.seed));
    ModelContext context;
    context.hp = hp;
    context.mesh = &mesh;
    optimizer.name = hp.optimizer;
    optimizer.lr = hp.lr;
    optimizer.beta2 = hp.beta2;
    optimizer.weight_decay = hp.weight_decay;
    optimizer.warmup_steps = hp.warmup_steps;
    optimizer.decay_matrices_only = true;
    strategy = make_strategy(resolved(hp), hp, mesh, make_model("gpt", context), optimizer);
    task->set_epoch(0);
  }
  // The global mean loss of step i at the job's learning-rate schedule.
  double step(int64_t i) {
    const Batch b = task->batch(i);
    const torch::Tensor sum = strategy->step(b, *task, learning_rate(optimizer, i));
    return strategy->loss_total(sum) / static_cast<double>(b.global_count);
  }
  parallel::DeviceMesh mesh;
  std::unique_ptr<Task> task;
  OptimizerConfig optimizer;
  std::unique_ptr<Strategy> strategy;
};

}  // namespace heft::train::train_test
