// What an optimizer holds and makes per step, as the memory model prices it: one table for
// heft-train's auto layout, the Python auto_layout and ShardedDataParallel's memory
// pre-flight (bound as _c10d.parallel.layout.optimizer_memory), so the figures cannot
// disagree between them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace heft::parallel::layout {

struct OptimizerMemory {
  std::string name;  // "adamw", "adam", "adamw-amsgrad", "adam-amsgrad", "sgd", "sgd-momentum", "none"
  // State elements per parameter element (Adam's exp_avg and exp_avg_sq: 2; momentum: 1).
  double state_per_element = 0;
  // State bytes per parameter tensor besides (Adam's float32 `step`: 4).
  double state_bytes_per_tensor = 0;
  // Temporaries of one step, as copies of the largest parameter tensor (AdamW and Adam: the
  // square root and the quotient; SGD with momentum: the update; plain SGD adds the gradient
  // in place: none).
  double step_tensor_copies = 0;
};

// Every row, in the order errors list them.
const std::vector<OptimizerMemory>& optimizer_memories();

// The row named `name`; heft::InvalidArgument listing the names otherwise.
const OptimizerMemory& optimizer_memory(std::string_view name);

}  // namespace heft::parallel::layout
