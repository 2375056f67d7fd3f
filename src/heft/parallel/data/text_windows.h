// The text heft-train's GPT trains on, and its batches, below train/ so that heft.torch
// (heft.torch.data.TextWindows, the extension links heft_parallel) draws exactly the batches
// heft-train draws: a Python twin of a heft-train run sees the same bytes at every step.
//
// Corpus: every regular file directly under the directory (default
// /usr/share/games/fortunes) except the `.dat` index files and `.u8` links (and any other
// symbolic link), concatenated in name order as bytes. The first 90% (rounded down) is for
// training, the rest is held out.
//
// A sample is a window of block_size + 1 bytes: inputs are its first block_size bytes,
// targets the last block_size (the next byte at each position). The global batch of step s
// of epoch e is batch_size windows at offsets drawn from a std::mt19937_64 seeded with
// batch_seed(seed, e, s), so it is the same at every world size and layout; data-parallel
// rank r of D takes a contiguous share of the windows (the first batch_size mod D ranks one
// more: share()), as DistributedSampler splits a batch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace heft::parallel::data {

inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";

struct TextCorpus {
  torch::Tensor train;  // (N,) int64 bytes
  torch::Tensor held_out;
};

// Throws heft::IoError naming the directory when it cannot be read or holds no text, and
// heft::InvalidArgument when the text is too short for one window of block_size + 1 bytes
// in each part.
TextCorpus load_text_corpus(const std::string& dir, int64_t block_size);

// The offsets of `count` windows of `window` bytes in a text of `size` bytes, from
// generator seed `seed` (the same on every rank and machine).
std::vector<int64_t> window_offsets(int64_t size, int64_t window, int64_t count, uint64_t seed);

// The generator seed of step `step` of epoch `epoch` under the run's seed.
uint64_t batch_seed(uint64_t seed, int64_t epoch, int64_t step);

// Rank's contiguous share [begin, end) of n items split over world ranks, the first
// n mod world ranks one item more.
std::pair<int64_t, int64_t> share(int64_t n, int rank, int world);

// Inputs and targets (b, block) of the windows of block + 1 bytes at `offsets` in text.
std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& text,
                                                const std::vector<int64_t>& offsets,
                                                int64_t block);

// Data-parallel rank `rank` of `ranks`'s share of the global batch of (epoch, step):
// batch_size windows of the training text.
std::pair<torch::Tensor, torch::Tensor> text_batch(const torch::Tensor& train, int64_t block,
                                                   int64_t batch_size, uint64_t seed,
                                                   int64_t epoch, int64_t step, int rank,
                                                   int ranks);

}  // namespace heft::parallel::data
