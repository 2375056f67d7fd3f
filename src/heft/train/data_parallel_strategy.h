// The data-parallel strategy (sharded_data_parallel_degree 1, partitions 1): every rank of
// the mesh's data group a full replica of the model (of its tensor slice when the model is
// tensor-parallel), DistributedDataParallel averaging gradients over the data group during
// backward (one allreduce a bucket, overlapping it); bf16 under CPU autocast, activation
// checkpointing of the model's units. Its checkpoint: a part per rank, the replica in the
// first data-parallel rank's; it also reads the single-writer form of an earlier heft.
#pragma once

#include <memory>

#include "heft/config/distribution.h"
#include "heft/parallel/mesh.h"
#include "heft/train/strategy.h"

namespace heft::train {

// make_strategy calls it; `mp` is the resolved distribution's (Distribution::with_overrides).
std::unique_ptr<Strategy> make_data_parallel_strategy(const Hyperparameters& hp,
                                                      const config::ModelParallel& mp,
                                                      parallel::DeviceMesh& mesh,
                                                      std::shared_ptr<Model> model,
                                                      const OptimizerConfig& optimizer);

}  // namespace heft::train
