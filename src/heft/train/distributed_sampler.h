// DistributedSampler: which samples each rank trains on, step by step, so that the ranks
// together see exactly the global batches one process would see.
//
// Terms: an epoch draws a permutation of the data set's indices, seeded by (seed, epoch),
// the same on every rank; its first `limit` entries (all when limit is 0) are the epoch's
// samples. They are cut, in order, into global batches of `global_batch` samples; the last
// may be partial. Each global batch is split into world_size contiguous shares, the first
// (n mod world_size) ranks taking one sample more. A last partial batch with fewer samples
// than ranks is dropped (no rank would be left with nothing to do). Every rank computes the
// same steps_per_epoch() and the same global batch sizes, so every rank runs the same number
// of steps and the collectives stay matched.
//
// A rank whose share differs from the mean (only in a partial batch) must weight its mean
// loss by share * world_size / global (Batch::loss_weight()) so that averaging gradients
// over ranks gives the global-batch mean.
//
// The permutation is a Fisher-Yates shuffle driven by std::mt19937_64: reproducible across
// runs, ranks and machines with the same standard library. Not thread-safe for set_epoch;
// const methods are.
// Deliberately left out: samplers over several data sets, replacement, class balancing.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace heft::train {

class DistributedSampler {
 public:
  struct Options {
    int64_t dataset_size = 0;  // samples in the data set; > 0
    int64_t global_batch = 0;  // samples per step over all ranks; >= world_size
    int rank = 0;
    int world_size = 1;
    uint64_t seed = 0;
    int64_t limit = 0;    // samples per epoch; 0 or more than dataset_size: all
    bool shuffle = true;  // false: the identity permutation (evaluation)
  };
  // This rank's share of one global batch.
  struct Batch {
    std::vector<int64_t> indices;  // this rank's samples (possibly fewer in the last batch)
    int64_t global_size = 0;       // samples of the whole global batch
    int world_size = 1;
    // Factor for this rank's mean loss so that the average over ranks is the global mean:
    // indices.size() * world_size / global_size (1 when the batch splits evenly).
    double loss_weight() const {
      return static_cast<double>(indices.size()) * world_size / static_cast<double>(global_size);
    }
  };

  // Throws heft::InvalidArgument naming the field when an option is out of range. Starts
  // at epoch 0.
  explicit DistributedSampler(Options options);

  // Draws epoch's permutation.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // Samples used per epoch (after limit) and steps per epoch (global batches, the last
  // partial one included unless it is smaller than world_size). Same on every rank.
  int64_t samples_per_epoch() const { return used_; }
  int64_t steps_per_epoch() const { return steps_; }
  // This rank's share of step `step` (0 <= step < steps_per_epoch()) of the current epoch.
  Batch batch(int64_t step) const;
  // The whole global batch of `step`, in the order the ranks' shares concatenate.
  std::vector<int64_t> global_batch(int64_t step) const;

  // Rank's contiguous share [begin, end) of n items split over world ranks, the first
  // n mod world ranks one more (how every global batch is split).
  static std::pair<int64_t, int64_t> share(int64_t n, int rank, int world);

  // The epoch permutation of 0..n-1 for (seed, epoch).
  static std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

 private:
  Options options_;
  int64_t epoch_ = 0;
  int64_t used_ = 0;
  int64_t steps_ = 0;
  std::vector<int64_t> order_;  // the current epoch's permutation
};

}  // namespace heft::train
