// ShardedDataParallel: parameters, gradients and optimizer state sharded over a group
// (ZeRO-3 / FSDP FULL_SHARD; ZeRO-2 / SHARD_GRAD_OP as an option), with hybrid sharding
// (shard inside a group, average across replicas of it: HSDP).
//
// The data path (gathers, reduce-scatters, the replicas' average, the shards) is FlatEngine's
// (flat_engine.h), which heft.torch.parallel's ShardedDataParallel runs too; this class is the
// C++ modules' surgery and hooks around it.
//
// Terms. A unit is a sub-module the model runs as one piece (a GPT block); the module's
// parameters that are in no unit form the root unit. Each unit's parameters are flattened,
// per optimizer group (group_of: weight decay or not), into flat parameters: the members'
// elements back to back in registration order, zero-padded to a multiple of the shard
// group's size S. Rank k of the shard group owns elements [k·n/S, (k+1)·n/S) of each flat
// parameter: its shard, a leaf tensor the optimizer steps (shards()). The module's own
// parameters become aliases into the flat parameter's full buffer, whose memory exists only
// while needed.
//
// One step:
//   forward    begin_forward() gathers the root unit (all-gather of the shards); the model
//              runs each unit through run_unit(i, x, f): unit i is gathered (the all-gather
//              was prefetched while unit i-1 computed), unit i+1's all-gather is started, f
//              runs, and with reshard_after_forward (ZeRO-3) unit i's full parameters are
//              freed again;
//   backward   a hook on unit i's output gathers unit i again (ZeRO-3) just before its
//              backward and prefetches unit i-1; once every gradient of a unit has been
//              accumulated (a hook per parameter), the unit's gradients are copied into a
//              flat buffer, reduce-scattered (average over the shard group, asynchronous)
//              and the unit's full parameters and gradients freed; at the end of backward
//              (an engine callback) the reduce-scatters are awaited, the shard gradients
//              averaged over the replicate group (hybrid) and handed to the shards' grad().
// After backward the shards' grads are the mean over all data-parallel ranks (shard x
// replicate) of the ranks' gradients: step the optimizer on shards() directly.
//
// Gradient accumulation: inside no_sync(), backward keeps the unit's full gradients in its
// flat buffer (no communication; memory: the full gradients) and adds to them; the first
// backward after it reduces the sum. The root unit stays gathered through no_sync passes
// (a pipeline runs several micro-batches' forwards before their backwards). A null unit is
// one this rank does not hold (a pipeline stage): it holds no parameters.
//
// Parameters a backward pass did not reach reduce zeros for their part (or the gradient
// they hold), as DDP's find_unused_parameters, so the collectives stay matched.
//
// The module's parameters must not be read between steps (their memory is freed); use
// full_parameters() to gather them. The module, the groups and their communicators must
// outlive this object. One backward at a time; not thread-safe.
// Deliberately left out: CPU offload, mixed precision of the communication, units that are
// not run through run_unit.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "heft/parallel/grad_buffer.h"
#include "heft/parallel/sharded/flat_engine.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel::sharded {

struct ShardedOptions {
  // ZeRO-3 (true): a unit's full parameters are freed after its forward and gathered again
  // for its backward. ZeRO-2 (false): kept from forward to the end of its backward.
  bool reshard_after_forward = true;
  // Start the next unit's all-gather while the current one computes.
  bool prefetch = true;
  // Recompute each unit's forward during its backward instead of keeping its activations.
  bool activation_checkpointing = false;
  // The dtype forward and backward compute in: the full parameters are gathered in it (the
  // shards, the gradients' reduction and the optimizer stay float32: master weights).
  // torch::kBFloat16 halves the all-gathers' bytes and uses the CPU's bf16 instructions.
  torch::ScalarType compute_dtype = torch::kFloat;
  // The optimizer group of a parameter (its flat parameter within its unit); default 0.
  std::function<int(const std::string& name, const torch::Tensor& param)> group_of;
};

// Where a member parameter lives in its flat parameter (for checkpoints and logs).
struct FlatMember {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in the flat parameter, elements
  int64_t numel = 0;
};

struct FlatInfo {
  int unit = 0;   // 0..units-1; units() for the root
  int group = 0;  // group_of's value
  std::vector<FlatMember> members;
  int64_t numel = 0;        // without padding
  int64_t shard_numel = 0;  // padded / shard size
};

class ShardedDataParallel {
 public:
  // Collective over shard (and replicate when given: hybrid) groups: the parameters are
  // taken from rank 0 of both (broadcast), flattened and sharded. units: sub-modules of
  // module, disjoint, in the order the model runs them. Throws heft::InvalidArgument when
  // a unit is not a sub-module of module, units overlap, or the ranks' modules differ.
  ShardedDataParallel(std::shared_ptr<torch::nn::Module> module,
                      std::vector<std::shared_ptr<torch::nn::Module>> units,
                      ProcessGroup& shard, ProcessGroup* replicate, ShardedOptions options = {});
  ~ShardedDataParallel();
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  // Gathers the root unit; call before the module's forward.
  void begin_forward();
  // Runs unit i: what the model's unit runner calls.
  torch::Tensor run_unit(size_t i, const torch::Tensor& x,
                         const std::function<torch::Tensor(const torch::Tensor&)>& f);
  // After a forward without backward (evaluation): frees every gathered unit.
  void end_forward_without_backward();

  // RAII: backward passes accumulate full gradients without communicating.
  class NoSync {
   public:
    explicit NoSync(ShardedDataParallel& s) : s_(s), previous_(s.sync_) { s_.sync_ = false; }
    ~NoSync() { s_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ShardedDataParallel& s_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // This rank's shards, one per flat parameter (leaf tensors with grads after backward),
  // and each one's optimizer group.
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  const std::vector<FlatInfo>& flats() const { return infos_; }
  // Multiplies every shard's grad by factor.
  void scale_grads(double factor);

  // Every parameter of the module at full size, by name (collective over the shard group).
  std::map<std::string, torch::Tensor> full_parameters();
  // Sets the shards from full parameters by name (every name of the module present).
  // Throws heft::InvalidArgument naming a missing parameter or a wrong shape.
  void load_full_parameters(const std::map<std::string, torch::Tensor>& params);
  // For checkpoints and resharding: the members' tensors (by name) laid out as flat
  // parameter `flat` (padded, zeros in the padding; throws heft::InvalidArgument naming a
  // missing member or a wrong shape), and this rank's slice of such a padded flat vector.
  torch::Tensor flatten(size_t flat, const std::map<std::string, torch::Tensor>& by_name) const;
  torch::Tensor my_slice(size_t flat, const torch::Tensor& full_flat) const;

  ProcessGroup& shard_group() { return shard_; }
  ProcessGroup* replicate_group() { return replicate_; }
  const ShardedCounters& counters() const { return engine_->counters(); }
  void reset_counters() { engine_->reset_counters(); }
  int64_t shard_bytes() const;
  int64_t grad_bytes() const;

 private:
  struct Flat {  // the engine's flat of the same index, with the module's side of it
    FlatInfo info;
    std::vector<torch::Tensor> params;  // the module's parameters (aliases into the full buffer)
    torch::Tensor grad_full;            // (padded,), while gradients are being gathered
  };
  struct Unit {  // the engine's unit of the same index
    std::vector<int> flats;
    int pending = 0;   // gradients not yet in this pass
    bool reduced = false;
  };
  struct Slot {  // one parameter
    int flat = 0, member = 0, unit = 0;
    GradientHookHandle hook;
  };

  // The constructor's work: build() runs make_flats, check_same_layout, shard_flats and
  // hook_slots in that order.
  void build(const std::vector<std::shared_ptr<torch::nn::Module>>& units);
  void make_flats(const std::map<const void*, int>& unit_of, int root);
  void check_same_layout();  // collective
  void shard_flats();        // collective
  void hook_slots();
  void on_gradient(int slot);
  void start_pass();
  void unit_gradients_ready(int unit);
  void finish_backward();

  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroup& shard_;
  ProcessGroup* replicate_;
  ShardedOptions options_;
  std::unique_ptr<FlatEngine> engine_;
  std::vector<Flat> flats_;
  std::vector<FlatInfo> infos_;
  std::vector<Unit> units_;  // units() then the root
  std::vector<Slot> slots_;
  std::vector<char> ready_;  // per slot, this pass
  std::vector<torch::Tensor> shards_;
  bool sync_ = true;
  bool in_pass_ = false;
};

}  // namespace heft::parallel::sharded
