// LibTorch state as checkpoint blobs: a module, an optimizer and torch's default CPU
// generator to bytes and back, for the files of a CheckpointDirectory (checkpoint_dir.h,
// the on-disk format, which knows nothing of LibTorch). The bytes are torch::serialize
// archives; rng's holds the generator state as a uint8 tensor under the key "cpu".
#pragma once

#include <torch/torch.h>

#include <string>

namespace heft::parallel {

// The load functions throw what torch::serialize throws (c10::Error) on bad bytes.
std::string module_to_bytes(const torch::nn::Module& module);
// Copies into the module's existing tensors (views and references held elsewhere, such as
// DDP's buckets or the optimizer, see the loaded values).
void module_from_bytes(torch::nn::Module& module, const std::string& bytes);
std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer);
void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes);
// torch's default CPU generator (torch::manual_seed, dropout, randn, ...).
std::string rng_to_bytes();
void rng_from_bytes(const std::string& bytes);

}  // namespace heft::parallel
