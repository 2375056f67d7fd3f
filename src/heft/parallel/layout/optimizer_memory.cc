#include "heft/parallel/layout/optimizer_memory.h"

#include "heft/error.h"

namespace heft::parallel::layout {

const std::vector<OptimizerMemory>& optimizer_memories() {
  // Measured on torch's CPU optimizers (docs/auto-layout.md, docs/sharded.md): the state
  // after the first step, the temporaries as the peak RSS of a step beyond it.
  static const std::vector<OptimizerMemory> rows = {
      {"adamw", 2, 4, 2},         {"adam", 2, 4, 2},        {"adamw-amsgrad", 3, 4, 2},
      {"adam-amsgrad", 3, 4, 2},  {"sgd", 0, 0, 0},         {"sgd-momentum", 1, 0, 1},
      {"none", 0, 0, 0},
  };
  return rows;
}

const OptimizerMemory& optimizer_memory(std::string_view name) {
  std::string names;
  for (const OptimizerMemory& m : optimizer_memories()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw InvalidArgument("optimizer '" + std::string(name) + "': expected one of " + names);
}

}  // namespace heft::parallel::layout
