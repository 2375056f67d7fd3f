// Sharded checkpoints that reshard: every rank writes its own shards and the layout they
// belong to; any later layout (another world size, shard degree, hybrid, or no sharding at
// all) reads the parts back as full tensors by parameter name and takes what it holds. One
// format for heft-train's strategies and for heft.torch's ShardedDataParallel (which writes
// and reads it through the binding): a checkpoint of either loads into the other.
//
// A rank's part (multi-writer checkpoint, parallel/checkpoint_dir.h), version 2:
//   unit-NNNNN.pt  per flat parameter f = NNNNN: a torch.save-compatible file
//                  (tensors_to_pickle; Python's torch.load reads it) holding a dictionary:
//                  "param" (this rank's shard of the flat, padded), "step" (int64, the
//                  optimizer's step count), and each shard-sized optimizer state tensor by
//                  its name ("exp_avg", "exp_avg_sq" for AdamW, "momentum_buffer" for SGD)
//                  once the optimizer has stepped
//   replicated.pt  (only where buffers are given: rank 0's part) the module's buffers by
//                  name, the same kind of file
//   layout.json  {"format": "heft-sharded", "version": 2, "optimizer": "adamw"|"sgd"|...,
//                 "shard_size": S, "shard_rank": k, "replicate_rank": r,
//                 "tensor_size": T, "tensor_rank": t, "pipeline_rank": s,
//                 "flats": [{"unit", "group", "numel", "shard_numel", "state": [names],
//                            "members": [{"name", "aliases": [..], "shape": [..], "offset",
//                                         "numel", "split": [dim, parts]}]}],
//                 "extra": {the writer's own JSON: heft.torch keeps the optimizer's
//                           param_groups and the state_dict's key order there}}
//   aliases: other names of the same tensor (a weight tied to another module).
// Version 1 (heft-train before 2026-11-30) kept every flat in one LibTorch archive,
// shard.pt, under "f<f>.param", "f<f>.<state>", "f<f>.step"; it is still read.
// Reading takes, for each tensor rank, the parts of replicate 0 (the replicas hold the same
// shards), orders them by shard rank, concatenates each flat and cuts it into its members
// (this tensor rank's slices); then joins the tensor ranks' slices of each parameter along
// its split (parallel/tensor: dim -1 replicated, taken from tensor rank 0).
// A replicated module (data parallel, with or without tensor parallelism) is written in the
// same form by save_replica(): every parameter its own flat, shard size 1.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
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
  std::string optimizer_name;  // "adamw" | "sgd" | another optimizer's name (heft.torch)
  std::map<std::string, std::string> aliases;   // other name -> the name in params
  std::map<std::string, torch::Tensor> buffers;  // replicated.pt, when written
  std::string extra_json = "{}";                 // the layout's "extra" (replicate 0, part 0)
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

// One flat of a part, as a writer gives it.
struct SavedFlat {
  torch::Tensor param;                           // this rank's shard (1-D)
  std::map<std::string, torch::Tensor> state;    // shard-sized optimizer state by name
  int64_t step = 0;                              // the optimizer's step count
  FlatInfo info;                                 // unit, group, sizes, members
  std::map<std::string, std::vector<std::string>> aliases;  // member name -> other names
};

// Where a part sits and what it carries besides its flats.
struct PartHeader {
  std::string optimizer_name;
  int shard_size = 1, shard_rank = 0, replicate_rank = 0, pipeline_rank = 0;
  TensorLayout tensor;
  std::map<std::string, torch::Tensor> buffers;  // written as replicated.pt when not empty
  std::string extra_json = "{}";                 // a JSON object, stored as given
};

// A part before its tensors are pickled: layout.json's text and each file's tensors by name
// (the live tensors, not copies).
struct PartTensors {
  std::string layout_json;
  std::map<std::string, std::map<std::string, torch::Tensor>> files;  // unit-NNNNN.pt, replicated.pt
};
// Throws heft::InvalidArgument for extra_json that is not a JSON object or a state tensor
// that is not shard-sized.
PartTensors part_tensors(const std::vector<SavedFlat>& flats, const PartHeader& header);
// A part's files (layout.json, unit-NNNNN.pt, replicated.pt).
std::map<std::string, std::string> write_part(const PartTensors& part);
std::map<std::string, std::string> write_part(const std::vector<SavedFlat>& flats,
                                              const PartHeader& header);
// A part copied as it is into one buffer (an index, then each tensor's bytes: one memcpy, no
// pickling, no checksum): in-place recovery's copy at every step boundary. files_from_copy
// gives write_part's files back; heft::IoError naming `what` for a buffer that is not one.
std::string copy_part(const PartTensors& part);
// The same into *out, whose capacity is reused (a buffer kept from an earlier copy: no fresh
// pages to fault in).
void copy_part(const PartTensors& part, std::string* out);
std::map<std::string, std::string> files_from_copy(const std::string& copy, const std::string& what);

// This rank's part of a sharded module (save_shards: write_part(shards_part(..))).
PartTensors shards_part(ShardedDataParallel& sdp, torch::optim::Optimizer& optimizer,
                        const std::string& optimizer_name, int replicate_rank,
                        const TensorLayout& tensor = {}, int pipeline_rank = 0);
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
PartTensors replica_part(torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                         const std::string& optimizer_name, int replicate_rank,
                         const TensorLayout& tensor = {}, int pipeline_rank = 0);
std::map<std::string, std::string> save_replica(torch::nn::Module& module,
                                                torch::optim::Optimizer& optimizer,
                                                const std::string& optimizer_name,
                                                int replicate_rank,
                                                const TensorLayout& tensor = {},
                                                int pipeline_rank = 0);

// Whether `parts` (a checkpoint's parts) are a sharded checkpoint (either version).
bool is_sharded_checkpoint(const std::vector<std::map<std::string, std::string>>& parts);

// The full state of a sharded checkpoint's parts. Throws heft::IoError naming `where` and
// what is missing or inconsistent (a part, a shard rank, a file).
NamedState read_sharded(const std::vector<std::map<std::string, std::string>>& parts,
                        const std::string& where);
// A sharded checkpoint read one saved flat at a time (every tensor rank's slices of it
// joined): a reader holds one flat's full tensors, not the model's. PartViews hold the parts
// by reference: from_bytes's `parts` must outlive the reader.
class ShardedReader {
 public:
  struct PartView;
  static ShardedReader from_bytes(const std::vector<std::map<std::string, std::string>>& parts,
                                  const std::string& where);
  // Files as paths (read when needed); errors name "who: PATH".
  static ShardedReader from_files(std::vector<std::map<std::string, std::string>> paths,
                                  const std::string& who);
  ShardedReader(ShardedReader&&) noexcept;
  ~ShardedReader();
  size_t size() const { return flats_.size(); }       // saved flats, every stage's
  NamedState read(size_t i);                            // flat i: params, optimizer, step, aliases
  NamedState read_all();                                // every flat, buffers, extra
  const std::vector<std::string>& names() const { return names_; }  // every parameter name, aliases too
  const std::map<std::string, torch::Tensor>& buffers() const { return buffers_; }
  const std::string& extra_json() const { return extra_json_; }
  const std::string& optimizer_name() const { return optimizer_name_; }

 private:
  struct Stage;
  ShardedReader(std::vector<PartView> parts, std::string where);
  std::vector<PartView> parts_;
  std::string where_;
  std::map<int, std::shared_ptr<Stage>> stages_;
  std::vector<std::pair<int, size_t>> flats_;  // (stage, flat)
  std::vector<std::string> names_;
  std::map<std::string, torch::Tensor> buffers_;
  std::string extra_json_ = "{}";
  std::string optimizer_name_;
};

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
