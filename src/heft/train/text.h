// Text for the GPT: the Debian package `fortunes` as bytes, and the "text" task (task.h).
//
// Corpus: every regular file directly under the directory (default
// /usr/share/games/fortunes) except the `.dat` index files and `.u8` links (and any other
// symbolic link), concatenated in name order as bytes. The first 90% (rounded down) is for
// training, the rest is held out.
//
// A sample is a window of block_size + 1 bytes: inputs are its first block_size bytes,
// targets the last block_size (the next byte at each position). The global batch of step s
// of epoch e is batch_size windows at offsets drawn from a std::mt19937_64 seeded with
// (seed, e, s), so it is the same at every world size and layout; data-parallel rank r of
// D takes a contiguous slice of the windows (the first batch_size mod D ranks one more), as
// DistributedSampler splits a batch. An epoch is as many steps as the training bytes hold
// windows' worth of tokens (at least 1). The loss is the cross-entropy summed over tokens,
// averaged over the global batch's batch_size x block_size tokens.
//
// Evaluation: 32 fixed windows of the held-out text (offsets from a generator seeded with
// 12345), split over the data-parallel ranks; val_loss is the mean cross-entropy per token.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "heft/parallel/data/text_windows.h"
#include "heft/train/task.h"

namespace heft::train {

// The corpus and its windows live in parallel/data/text_windows.h (heft.torch binds them).
using parallel::data::kDefaultFortunesDir;
using parallel::data::load_text_corpus;
using parallel::data::TextCorpus;
using parallel::data::window_offsets;

// The "text" task over hp.data (default kDefaultFortunesDir) for data-parallel rank
// data_rank of data_size.
std::unique_ptr<Task> make_text_task(const Hyperparameters& hp, int data_rank, int data_size);

}  // namespace heft::train
