// The GPT heft's model-parallel work is measured on: GPT-2 style, pre-LayerNorm, over bytes.
//
//   tok: Embedding(256, d)   pos: Embedding(block_size, d)   (learned positions)
//   n_layer blocks:  x = x + proj(attention(qkv(ln1(x))))     causal, n_head heads
//                    x = x + out(gelu_tanh(fc(ln2(x))))       fc: d -> 4d, out: 4d -> d
//   ln_f, head: Linear(d, 256) without bias, not tied to tok
// No dropout. Initialisation: every matrix (embeddings and Linear weights) normal(0, 0.02),
// the residual output projections (proj, out) normal(0, 0.02 / sqrt(2 n_layer)), biases 0,
// LayerNorm weight 1 and bias 0: the model of ../shared/peers/gpt_torch.py, parameter for
// parameter (same names after "blocks.").
//
// Inputs: (B, T) int64 bytes with T <= block_size; outputs: (B, T, 256) logits.
// The blocks are the model's units (units()): a strategy that shards parameters or
// recomputes activations runs each block through set_unit_runner's function.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

#include "heft/train/models.h"

namespace heft::train {

struct GptConfig {
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;
  int64_t vocab = 256;
};

class GptBlock : public torch::nn::Module {
 public:
  GptBlock(const GptConfig& c);
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, d) -> (B, T, d)

 private:
  int64_t n_head_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, out_{nullptr};
};

class Gpt : public Model {
 public:
  explicit Gpt(const GptConfig& c);
  torch::Tensor forward(torch::Tensor idx) override;
  std::vector<std::shared_ptr<torch::nn::Module>> units() override;
  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// Samples n bytes from a byte model's `forward` ((1, T) ids -> (1, T, 256) logits), starting
// from a newline, temperature 1, the context cut to the last block_size bytes. Draws from a
// generator seeded with `seed`, so every rank running it draws the same bytes (and a
// forward that is a collective stays matched).
std::string generate_bytes(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                           int64_t block_size, int64_t n, uint64_t seed);

}  // namespace heft::train
