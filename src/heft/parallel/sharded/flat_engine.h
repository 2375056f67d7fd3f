// FlatEngine: the data path of sharded data parallel (ZeRO-3 / FSDP), shared by heft-train's
// ShardedDataParallel (sharded_data_parallel.h, C++ modules) and heft.torch.parallel's
// ShardedDataParallel (Python modules, through _c10d.parallel.sharded). It knows flat
// parameters and units, not modules: the callers do the module surgery (which parameters make
// a flat, parameters as views of the full buffer, autograd hooks) and tell the engine when a
// unit is needed and when a flat's gradient is complete.
//
// Terms. A flat parameter is a list of parameters back to back, zero-padded to a multiple of
// the shard group's size S (max(numel, 1) rounded up). Rank k of the shard group holds
// elements [k·n/S, (k+1)·n/S): its shard, a float32 leaf tensor the optimizer steps (the
// master weights). Its full buffer (padded, in the compute dtype) has storage only while its
// unit is gathered: release() frees it, gather() allocates it again, and every tensor that
// views it (the module's parameters) follows. A unit is a set of flats gathered together.
//
// The step, as the callers drive it:
//   gather(u, prefetch)   starts the all-gathers of u's flats (allocating);
//   wait_gathered(u)      waits for them;
//   release(u)            frees u's full buffers (waiting first);
//   reduce(f, grad)       grad: flat f's full gradient (padded); starts its reduce-scatter
//                         (average over the shard group, in the reduce dtype). With
//                         max_reductions_in_flight set, waits for the oldest first when that
//                         many are in flight (each holds its full gradient);
//   finish_reductions()   waits for them all, averages each flat's shard gradient over the
//                         replicate group (hybrid), and adds it to the shard's grad() (sets it
//                         when undefined). After it the shards' grads are the mean over every
//                         data-parallel rank of the ranks' gradients.
// Without a shard group (one rank) the collectives are copies. Every collective is issued in
// the callers' order, which must be the same on every rank of the group.
//
// The groups must outlive the engine. Not thread-safe. Errors of a collective (heft::PeerLost,
// heft::Timeout) come out of the wait that meets them.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "heft/parallel/process_group.h"

namespace heft::parallel::sharded {

struct EngineOptions {
  // The full buffers' dtype (what forward and backward compute in); shards stay float32.
  torch::ScalarType compute_dtype = torch::kFloat;
  // The reduce-scatter's dtype; the shards' grads are float32 whatever it is.
  torch::ScalarType reduce_dtype = torch::kFloat;
  // Reduce-scatters in flight at most (0: no limit).
  int max_reductions_in_flight = 0;
};

// What the engine did since the last reset, for tests and logs.
struct ShardedCounters {
  int64_t allgathers = 0;            // one per flat gathered
  int64_t prefetched = 0;            // gather() calls made ahead of their unit's use
  int64_t max_gathered = 0;          // most units gathered at once
  int64_t reduce_scatters = 0;       // one per reduce()
  int64_t replicate_allreduces = 0;  // one per flat reduced, with a replicate group
  int64_t reductions_capped = 0;     // reduce() waited for the oldest reduction first
  int64_t max_reductions_in_flight = 0;
};

class FlatEngine {
 public:
  // shard: the group a flat is sharded over (null: one rank); replicate: the group whose
  // ranks hold the same shards (hybrid; null or size 1: none).
  FlatEngine(ProcessGroup* shard, ProcessGroup* replicate, EngineOptions options = {});
  ~FlatEngine();
  FlatEngine(const FlatEngine&) = delete;
  FlatEngine& operator=(const FlatEngine&) = delete;

  int shard_size() const { return shard_ ? shard_->size() : 1; }
  int shard_rank() const { return shard_ ? shard_->rank() : 0; }
  // Elements of one rank's shard of a flat of `numel` elements.
  int64_t shard_numel_for(int64_t numel) const;

  // This rank's shard (float32, padded) of `values` (a flat's elements, unpadded) as rank 0
  // of the shard group, then of the replicate group, has them (broadcasts). Collective.
  torch::Tensor shard_of_first_rank(const torch::Tensor& values);

  // A flat of `numel` elements whose shard on this rank is `shard` (float32, shard_numel_for
  // (numel) elements; the engine keeps the tensor: the caller's leaf). Returns its index.
  int add_flat(torch::Tensor shard, int64_t numel);
  // A unit of flats (each in at most one unit). Returns its index.
  int add_unit(std::vector<int> flats);

  size_t flats() const { return flats_.size(); }
  size_t units() const { return units_.size(); }
  const torch::Tensor& shard(int flat) const { return flats_.at(flat).shard; }
  // The full buffer (padded, compute dtype); storage only while its unit is gathered.
  const torch::Tensor& full(int flat) const { return flats_.at(flat).full; }
  int64_t numel(int flat) const { return flats_.at(flat).numel; }
  int64_t padded(int flat) const { return flats_.at(flat).full.numel(); }

  void gather(int unit, bool prefetch);
  void wait_gathered(int unit);
  void release(int unit);
  bool gathered(int unit) const { return units_.at(unit).gathered; }
  // Whether any all-gather was started and not yet waited for.
  bool gather_in_flight() const;

  void reduce(int flat, const torch::Tensor& grad);
  void finish_reductions();
  // Reductions started and not finished.
  size_t reductions_pending() const { return pending_.size(); }

  // Flat f's values, all ranks' shards joined (float32, padded); with `part` (a vector the
  // size of this rank's shard: an optimizer's state of it), every rank's part joined instead.
  // Collective.
  torch::Tensor full_values(int flat, const torch::Tensor& part = {});
  // This rank's part of a padded flat vector of flat f.
  torch::Tensor my_slice(int flat, const torch::Tensor& padded_values) const;
  // Multiplies every shard's grad by factor.
  void scale_grads(double factor);
  // Scales the shards' grads so that their norm over the whole model (every rank's shard)
  // is at most max_norm; returns the norm before (torch's clip_grad_norm_). Collective.
  double clip_grad_norm(double max_norm, double norm_type);

  const ShardedCounters& counters() const { return counters_; }
  void reset_counters() { counters_ = {}; }

 private:
  struct Flat {
    torch::Tensor shard;     // float32 leaf, shard_numel
    torch::Tensor full;      // padded, compute dtype; storage present only while gathered
    torch::Tensor full_raw;  // full's data with a version counter of its own (writes here
                             // leave the views autograd saved alone)
    torch::Tensor send;      // what an all-gather in flight sends
    std::shared_ptr<Work> gather;
    int64_t numel = 0;
    int unit = -1;
  };
  struct Unit {
    std::vector<int> flats;
    bool gathered = false;
  };
  struct Pending {  // a reduction started and not finished
    int flat = 0;
    torch::Tensor out;  // the shard gradient, reduce dtype
    std::shared_ptr<Work> work;  // null once waited (or for one rank)
  };

  ProcessGroup* shard_;
  ProcessGroup* replicate_;
  EngineOptions options_;
  std::vector<Flat> flats_;
  std::vector<Unit> units_;
  std::vector<Pending> pending_;
  ShardedCounters counters_;
};

}  // namespace heft::parallel::sharded
