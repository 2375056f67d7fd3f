// The automatic partitioner: the model as an ordered list of layers with profiled costs,
// cut into `stages` contiguous ranges so that the largest stage cost is as small as
// possible, where a stage's cost is
//   (1 - memory_weight) x (its share of the forward + backward time)
//     + memory_weight x (its share of the memory: parameter + activation bytes).
// Exact: a dynamic program finds the smallest achievable largest cost, then a second one
// chooses among the splits that achieve it (or come within a tolerance of it) by criteria
// that do not depend on timings: the fewest activation bytes crossing the cuts, then the most
// even layer counts, then a fixed order. optimize: speed means memory_weight 0.2, memory 0.8
// (the seeds' defaults).
//
// The costs come from a profile (profile_layers): warm-up rounds, then repeated rounds, each
// layer's median; a round times every layer once, in order, so a burst of load on the
// machine falls on one round of every layer rather than on every round of one layer.
#pragma once

#include <cstdint>
#include <functional>
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

// The split of `layers` into `stages` with the smallest largest cost. With tolerance t > 0,
// every split whose largest cost is at most (1 + t) x the smallest counts as equally good,
// and the choice among them depends only on the layers' activation bytes and order (fewest
// bytes crossing the cuts, then the smallest sum of squared stage sizes in layers, then the
// latest start of the last stage, of the stage before it, ...: the extra layers of an uneven
// split go to the earlier stages, away from a language model's head): two profiles whose times
// differ by less than the tolerance choose the same split unless a split sits at its edge.
// t = 0: only optimal splits. Deterministic: the same costs give the same plan.
// Throws heft::InvalidArgument naming partitions when stages exceed the layers (or < 1),
// memory_weight outside [0, 1], and tolerance negative or not finite.
Plan auto_partition(const std::vector<LayerCost>& layers, int stages, double memory_weight,
                    double tolerance = 0);
// A given split (first layer of each stage after the first, ascending): the same numbers.
// Throws heft::InvalidArgument naming partition_boundaries when it is not a valid split.
Plan manual_partition(const std::vector<LayerCost>& layers, const std::vector<int>& boundaries,
                      double memory_weight);
// The plan as a table: stage, layers, time, memory, cost.
std::string describe(const Plan& plan, const std::vector<LayerCost>& layers);

// Per stage of `stages` (stage s holds virtual stages s, s + stages, ...): its layers, the
// plan's forward + backward time per micro-batch (predicted) and measured_s[s] (measured)
// side by side in ms, with their ratio; `measured` says what was measured. Throws
// heft::InvalidArgument when measured_s does not hold one value per stage.
std::string describe_measured(const Plan& plan, const std::vector<LayerCost>& layers, int stages,
                              const std::vector<double>& measured_s, const std::string& measured);

// How profile_layers times: `warmup` untimed rounds, then `repeats` timed rounds.
struct ProfileOptions {
  int warmup = 3;
  int repeats = 15;
};

// Runs time_layer(i, &forward_s, &backward_s) for every layer i in order, options.warmup
// rounds untimed and then options.repeats rounds, and sets each layer's forward_s and
// backward_s to the median of its timed rounds (the other fields are left as they are).
// time_layer runs layer i once and says how long its forward and its backward took.
// Throws heft::InvalidArgument naming the option for warmup < 0 or repeats < 1; what
// time_layer throws passes through.
void profile_layers(std::vector<LayerCost>& layers, const ProfileOptions& options,
                    const std::function<void(int layer, double* forward_s, double* backward_s)>& time_layer);

// The median of values: the middle one, the mean of the middle two for an even count; 0 for
// none.
double median(std::vector<double> values);

}  // namespace heft::parallel::pipeline
