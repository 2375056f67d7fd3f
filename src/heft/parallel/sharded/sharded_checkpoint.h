// Sharded checkpoints that reshard: every rank writes its own shards and the layout they
// belong to; any later layout (another world size, shard degree, hybrid, or no sharding at
// all) reads the parts back as full tensors by parameter name and takes what it holds.
//
// A rank's part (multi-writer checkpoint, parallel/checkpoint.h) holds two files:
//   shard.pt     torch archive: for flat parameter f, "f<f>.param" (this rank's shard of
//                the flat, padded), and the optimizer's state of that shard:
//                "f<f>.exp_avg", "f<f>.exp_avg_sq", "f<f>.step" (adamw) or
//                "f<f>.momentum_buffer" (sgd), when the optimizer has stepped
//   layout.json  {"format": "heft-sharded", "version": 1, "optimizer": "adamw"|"sgd",
//                 "shard_size": S, "shard_rank": k, "replicate_rank": r,
//                 "flats": [{"unit", "group", "numel", "shard_numel",
//                            "members": [{"name", "shape": [..], "offset", "numel"}]}]}
// Reading takes the parts of replicate 0 (the replicas hold the same shards), orders them
// by shard rank, concatenates each flat and cuts it into its members.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "heft/parallel/sharded/sharded_data_parallel.h"

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

// This rank's part: files shard.pt and layout.json.
std::map<std::string, std::string> save_shards(ShardedDataParallel& sdp,
                                               torch::optim::Optimizer& optimizer,
                                               const std::string& optimizer_name,
                                               int replicate_rank);

// Whether `parts` (a checkpoint's parts) were written by save_shards.
bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts);

// The full state of a sharded checkpoint's parts. Throws heft::IoError naming `where` and
// what is missing or inconsistent (a part, a shard rank, a file).
NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where);

// Loads named state into a sharded module and the optimizer over its shards (this rank's
// slice of every flat). Throws heft::InvalidArgument naming a parameter that is missing or
// has another shape, or another optimizer, before anything is changed.
void load_named_state(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state);

// The same for a replicated module (data parallel) and its optimizer over
// module.parameters().
void load_named_state(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                      const std::string& optimizer_name, const NamedState& state);

}  // namespace heft::parallel::sharded
