// Sharded checkpoints that reshard: every rank writes its own shards and the layout they
// belong to; any later layout (another world size, shard degree, hybrid, or no sharding at
// all) reads the parts back as full tensors by parameter name and takes what it holds.
//
// A rank's part (multi-writer checkpoint, parallel/checkpoint_dir.h) holds two files:
//   shard.pt     torch archive: for flat parameter f, "f<f>.param" (this rank's shard of
//                the flat, padded), and the optimizer's state of that shard:
//                "f<f>.exp_avg", "f<f>.exp_avg_sq", "f<f>.step" (adamw) or
//                "f<f>.momentum_buffer" (sgd), when the optimizer has stepped
//   layout.json  {"format": "heft-sharded", "version": 1, "optimizer": "adamw"|"sgd",
//                 "shard_size": S, "shard_rank": k, "replicate_rank": r,
//                 "tensor_size": T, "tensor_rank": t, "pipeline_rank": s,
//                 "flats": [{"unit", "group", "numel", "shard_numel",
//                            "members": [{"name", "shape": [..], "offset", "numel",
//                                         "split": [dim, parts]}]}]}
// Reading takes, for each tensor rank, the parts of replicate 0 (the replicas hold the same
// shards), orders them by shard rank, concatenates each flat and cuts it into its members
// (this tensor rank's slices); then joins the tensor ranks' slices of each parameter along
// its split (parallel/tensor: dim -1 replicated, taken from tensor rank 0).
// A replicated module (data parallel, with or without tensor parallelism) is written in the
// same form by save_replica(): every parameter its own flat, shard size 1.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "heft/parallel/sharded/sharded_data_parallel.h"
#include "heft/parallel/tensor/tensor_parallel.h"

namespace heft::parallel::sharded {

// Full tensors by parameter name: what every layout can load.
struct NamedState {
  std::map<std::string, torch::Tensor> params;
  // Per parameter: "exp_avg", "exp_avg_sq" (adamw) or "momentum_buffer" (sgd). Empty before
  // the optimizer's first step.
  std::map<std::string, std::map<std::string, torch::Tensor>> optimizer;
  int64_t adam_step = 0;
  std::string optimizer_name;  // "adamw" | "sgd"
};

// Where this rank sits in a tensor-parallel group and how each parameter is cut from the
// full model's (absent: replicated).
struct TensorLayout {
  int rank = 0;
  int size = 1;
  std::map<std::string, tensor::Split> splits;
  tensor::Split split_of(const std::string& name) const {
    const auto it = splits.find(name);
    return it == splits.end() ? tensor::Split{} : it->second;
  }
};

// This rank's part: files shard.pt and layout.json.
std::map<std::string, std::string> save_shards(ShardedDataParallel& sdp,
                                               torch::optim::Optimizer& optimizer,
                                               const std::string& optimizer_name,
                                               int replicate_rank,
                                               const TensorLayout& tensor = {},
                                               int pipeline_rank = 0);
// The part of a rank holding a whole replica of `module` (its tensor slice); replicate_rank
// is its data-parallel index (only index 0's part is read back).
// pipeline_rank: the stage whose layers `module` holds (the parts of every stage together
// make the model).
std::map<std::string, std::string> save_replica(torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer,
                                                const std::string& optimizer_name,
                                                int replicate_rank,
                                                const TensorLayout& tensor = {},
                                                int pipeline_rank = 0);

// Whether `parts` (a checkpoint's parts) were written by save_shards.
bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts);

// The full state of a sharded checkpoint's parts. Throws heft::IoError naming `where` and
// what is missing or inconsistent (a part, a shard rank, a file).
NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where);

// This tensor rank's slices of a full state.
NamedState local_view(const NamedState& full, const TensorLayout& tensor);

// Loads named state into a sharded module and the optimizer over its shards (this rank's
// slice of every flat). Throws heft::InvalidArgument naming a parameter that is missing or
// has another shape, or another optimizer, before anything is changed.
void load_named_state(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state,
                      bool subset = false);

// The same for a replicated module (data parallel) and its optimizer over
// module.parameters().
// subset: the module is a pipeline stage and holds some of the state's parameters only.
void load_named_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state,
                      bool subset = false);

}  // namespace heft::parallel::sharded
