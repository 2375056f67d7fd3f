// The sharded data-parallel strategy (sharded_data_parallel_degree > 1, partitions 1):
// parameters, gradients and optimizer state sharded over the mesh's shard group
// (parallel/sharded, ZeRO-3, or ZeRO-2 with zero_stage 2), averaged across its replicate
// group (hybrid) when the shard group is smaller than the data group; tensor-parallel inside
// when the model is; bf16 as bfloat16 gathers of float32 shards. Its checkpoint: a part per
// rank, read back at any world size and degree.
#pragma once

#include <memory>

#include "heft/config/distribution.h"
#include "heft/parallel/mesh.h"
#include "heft/train/strategy.h"

namespace heft::train {

// make_strategy calls it; `mp` is the resolved distribution's (Distribution::with_overrides).
std::unique_ptr<Strategy> make_sharded_strategy(const Hyperparameters& hp,
                                                const config::ModelParallel& mp,
                                                parallel::DeviceMesh& mesh,
                                                std::shared_ptr<Model> model,
                                                const OptimizerConfig& optimizer);

}  // namespace heft::train
