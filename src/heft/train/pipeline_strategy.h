// The pipelined strategy (partitions > 1): the model cut into stages over the mesh's pipeline
// group, each stage replicated (DDP) or sharded over its data ranks and split over the tensor
// group when the model is; a step runs this stage's action list of the schedule
// (parallel/pipeline). Its split comes from a given list, an even one, or the automatic
// partitioner over one profile (profile_pipeline_layers) that every rank shares.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "heft/parallel/mesh.h"
#include "heft/parallel/pipeline/partition.h"
#include "heft/train/models.h"
#include "heft/train/strategy.h"

namespace heft::train {

// The strategy for settings.partitions > 1 (make_strategy calls it, with the resolved
// distribution's modelparallel: config::Distribution::with_overrides). Profiles the model on
// the ranks at pipeline 0 and data 0 when the split is automatic, and every rank takes their
// costs (collective over the mesh). Throws heft::InvalidArgument naming the setting for a
// model that cannot be cut, more stages than layers, bad partition_boundaries, or a schedule
// the simulator finds deadlocked.
std::unique_ptr<Strategy> make_pipeline_strategy(const Hyperparameters& hp,
                                                 const config::ModelParallel& settings,
                                                 parallel::DeviceMesh& mesh,
                                                 std::shared_ptr<Model> model,
                                                 const OptimizerConfig& optimizer);

// The automatic split's profile: each of model's pipeline layers (layer_names) run on its
// own on a sample of `microbatch` samples (sample_input), each layer reading the previous
// one's output, timed by parallel::pipeline::profile_layers (warm-up rounds, then each
// layer's median) in the process's CPU time (what waiting for a core on a shared machine
// does not change); with its parameter bytes and its output's bytes. The layers' gradients
// are left undefined and the global random generator's state as it was. A model without
// sample_input gets names only (zero costs). A tensor-parallel model runs its tensor
// collectives: every rank of its tensor group calls this together.
std::vector<parallel::pipeline::LayerCost> profile_pipeline_layers(
    Model& model, int64_t microbatch, const parallel::pipeline::ProfileOptions& options = {});
// Splits whose largest stage cost is within this share of the best count as equally good
// (auto_partition's tolerance): profiling noise below it does not change the split.
// 10%: two profiles of one model on a loaded 2-core machine differ by up to about 10% a
// layer; heft's LoadBalancing rule flags 50%.
constexpr double kPartitionTolerance = 0.10;

}  // namespace heft::train
