#include "heft/train/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "heft/error.h"
#include "heft/parallel/data/text_windows.h"

namespace heft::train {

DistributedSampler::DistributedSampler(Options options) : options_(options) {
  auto fail = [](const std::string& what) { throw InvalidArgument("DistributedSampler: " + what); };
  if (options_.world_size < 1)
    fail("world_size must be at least 1, got " + std::to_string(options_.world_size));
  if (options_.rank < 0 || options_.rank >= options_.world_size)
    fail("rank " + std::to_string(options_.rank) + " is outside 0.." +
         std::to_string(options_.world_size - 1));
  if (options_.dataset_size < 1)
    fail("the data set is empty (dataset_size " + std::to_string(options_.dataset_size) + ")");
  if (options_.global_batch < options_.world_size)
    fail("the global batch (" + std::to_string(options_.global_batch) +
         ") must be at least the number of ranks (" + std::to_string(options_.world_size) + ")");
  if (options_.limit < 0) fail("limit must not be negative, got " + std::to_string(options_.limit));
  used_ =
      options_.limit > 0 ? std::min(options_.limit, options_.dataset_size) : options_.dataset_size;
  steps_ = used_ / options_.global_batch;
  if (used_ % options_.global_batch >= options_.world_size) ++steps_;
  if (steps_ == 0)
    fail("an epoch of " + std::to_string(used_) + " samples has no step with at least " +
         std::to_string(options_.world_size) + " samples");
  set_epoch(0);
}

std::vector<int64_t> DistributedSampler::permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), static_cast<uint32_t>(epoch >> 32)};
  std::mt19937_64 rng(seq);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  if (options_.shuffle) {
    order_ = permutation(options_.dataset_size, options_.seed, epoch);
  } else {
    order_.resize(static_cast<size_t>(options_.dataset_size));
    std::iota(order_.begin(), order_.end(), 0);
  }
}

std::vector<int64_t> DistributedSampler::global_batch(int64_t step) const {
  if (step < 0 || step >= steps_)
    throw InvalidArgument("DistributedSampler: step " + std::to_string(step) + " is outside 0.." +
                          std::to_string(steps_ - 1));
  const int64_t begin = step * options_.global_batch;
  const int64_t end = std::min(begin + options_.global_batch, used_);
  return std::vector<int64_t>(order_.begin() + begin, order_.begin() + end);
}

DistributedSampler::Batch DistributedSampler::batch(int64_t step) const {
  const std::vector<int64_t> all = global_batch(step);
  const auto n = static_cast<int64_t>(all.size());
  const auto [begin, end] = share(n, options_.rank, options_.world_size);
  Batch b;
  b.indices.assign(all.begin() + begin, all.begin() + end);
  b.global_size = n;
  b.world_size = options_.world_size;
  return b;
}

std::pair<int64_t, int64_t> DistributedSampler::share(int64_t n, int rank, int world) {
  return parallel::data::share(n, rank, world);
}

}  // namespace heft::train
