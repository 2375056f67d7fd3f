// LibTorch helpers for checkpoints: a module, an optimizer and torch's default CPU
// generator as blobs for CheckpointDirectory (checkpoint_dir.h, which documents the
// on-disk format and is re-exported here so that users of either keep one include).
#pragma once

#include <torch/torch.h>

#include <string>

#include "heft/parallel/checkpoint_dir.h"

namespace heft::parallel {

// Blobs. The load functions throw what torch::serialize throws (c10::Error) on bad bytes.
std::string module_to_bytes(const torch::nn::Module& module);
void module_from_bytes(torch::nn::Module& module, const std::string& bytes);
std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes);
// torch's default CPU generator (torch::manual_seed, dropout, randn, ...).
std::string rng_to_bytes();
void rng_from_bytes(const std::string& bytes);

}  // namespace heft::parallel
