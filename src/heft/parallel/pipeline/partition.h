// The automatic partitioner: the model as an ordered list of layers with profiled costs,
// cut into `stages` contiguous ranges so that the largest stage cost is as small as
// possible, where a stage's cost is
//   (1 - memory_weight) x (its share of the forward + backward time)
//     + memory_weight x (its share of the memory: parameter + activation bytes).
// Exact: a dynamic program finds the smallest achievable largest cost, then a second one the
// split with the fewest activation bytes crossing the cuts among those that achieve it.
// optimize: speed means memory_weight 0.2, memory 0.8 (the seeds' defaults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heft::parallel::pipeline {

struct LayerCost {
  std::string name;
  double forward_s = 0;
  double backward_s = 0;
  int64_t param_bytes = 0;
  int64_t activation_bytes = 0;  // of its output: what crosses a cut after it
};

struct Plan {
  std::vector<int> first;        // per stage, its first layer (first[0] = 0)
  double max_cost = 0;           // the largest stage cost (shares, 0..1)
  int64_t cut_bytes = 0;         // activation bytes crossing the cuts
  std::vector<double> cost;      // per stage
  std::vector<double> time_s;    // per stage: forward + backward
  std::vector<int64_t> memory;   // per stage: parameter + activation bytes
  int last_layer(int stage, int layers) const {
    return stage + 1 < static_cast<int>(first.size()) ? first[stage + 1] - 1 : layers - 1;
  }
};

// Throws heft::InvalidArgument naming partitions when stages exceed the layers (or < 1),
// and memory_weight outside [0, 1].
Plan auto_partition(const std::vector<LayerCost>& layers, int stages, double memory_weight);
// A given split (first layer of each stage after the first, ascending): the same numbers.
// Throws heft::InvalidArgument naming partition_boundaries when it is not a valid split.
Plan manual_partition(const std::vector<LayerCost>& layers, const std::vector<int>& boundaries,
                      double memory_weight);
// The plan as a table: stage, layers, time, memory, cost.
std::string describe(const Plan& plan, const std::vector<LayerCost>& layers);

}  // namespace heft::parallel::pipeline
