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

#include "heft/parallel/process_group.h"
#include "heft/parallel/tensor/tensor_parallel.h"
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
  friend class TensorParallelGptBlock;
  int64_t n_head_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc_{nullptr}, out_{nullptr};
};

// Pipeline layers of both GPTs: "embedding" (tok + pos), "block.0" .. "block.<n_layer-1>",
// "head" (final LayerNorm + head).
class Gpt : public Model {
 public:
  friend class TensorParallelGpt;
  template <class G> friend torch::Tensor gpt_range(G&, int, int, const torch::Tensor&);
  template <class G> friend void gpt_keep(G&, const std::vector<bool>&);
  template <class G> friend std::vector<torch::Tensor> gpt_layer_parameters(G&, int);
  explicit Gpt(const GptConfig& c);
  torch::Tensor forward(torch::Tensor idx) override;
  std::vector<std::shared_ptr<torch::nn::Module>> units() override;
  std::vector<std::string> layer_names() const override;
  torch::Tensor forward_range(int first, int last, const torch::Tensor& x) override;
  void keep_layers(const std::vector<bool>& keep) override;
  std::vector<torch::Tensor> layer_parameters(int layer) override;
  torch::Tensor sample_input(int64_t batch) const override;
  const GptConfig& config() const { return config_; }

 private:
  GptConfig config_;
  torch::nn::Embedding tok_{nullptr}, pos_{nullptr};
  std::vector<std::shared_ptr<GptBlock>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};

// The GPT split over a tensor group of T ranks (Megatron's layout, parallel/tensor): each
// block's heads split (qkv column-parallel: this rank's heads' rows of q, k and v; the
// output projection row-parallel), its MLP column- then row-parallel, the token embedding
// and the head vocabulary-parallel; LayerNorms and positions replicated. Built from the
// full model's weights (constructed first from the current torch seed), keeping this
// rank's slice, so every T starts from the T = 1 model. Parameter names are the full
// model's; tensor_splits() says how each is cut. Forward returns this rank's vocabulary
// slice of the logits (B, T, 256/T); loss_sum() is the vocabulary-parallel cross-entropy;
// full_outputs() gathers the logits. Throws heft::InvalidArgument when T does not divide
// n_head, n_embd or the vocabulary (naming it).
class TensorParallelGptBlock : public torch::nn::Module {
 public:
  TensorParallelGptBlock(const GptConfig& c, parallel::ProcessGroup& group);
  torch::Tensor forward(const torch::Tensor& x);
  void load_full(GptBlock& full);

 private:
  int64_t local_heads_;
  int rank_, size_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  parallel::tensor::ColumnParallelLinear qkv_{nullptr}, fc_{nullptr};
  parallel::tensor::RowParallelLinear proj_{nullptr}, out_{nullptr};
};

class TensorParallelGpt : public Model {
 public:
  template <class G> friend torch::Tensor gpt_range(G&, int, int, const torch::Tensor&);
  template <class G> friend void gpt_keep(G&, const std::vector<bool>&);
  template <class G> friend std::vector<torch::Tensor> gpt_layer_parameters(G&, int);
  TensorParallelGpt(const GptConfig& c, parallel::ProcessGroup& group);
  torch::Tensor forward(torch::Tensor idx) override;
  std::vector<std::shared_ptr<torch::nn::Module>> units() override;
  std::vector<std::string> layer_names() const override;
  torch::Tensor forward_range(int first, int last, const torch::Tensor& x) override;
  void keep_layers(const std::vector<bool>& keep) override;
  std::vector<torch::Tensor> layer_parameters(int layer) override;
  torch::Tensor sample_input(int64_t batch) const override;
  std::map<std::string, parallel::tensor::Split> tensor_splits() const override;
  torch::Tensor loss_sum(const torch::Tensor& logits, const torch::Tensor& targets) override;
  torch::Tensor full_outputs(const torch::Tensor& logits) override;

 private:
  GptConfig config_;
  parallel::ProcessGroup& group_;
  parallel::tensor::VocabParallelEmbedding tok_{nullptr};
  torch::nn::Embedding pos_{nullptr};
  std::vector<std::shared_ptr<TensorParallelGptBlock>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  parallel::tensor::ColumnParallelLinear head_{nullptr};
};

// Samples n bytes from a byte model's `forward` ((1, T) ids -> (1, T, 256) logits), starting
// from a newline, temperature 1, the context cut to the last block_size bytes. Draws from a
// generator seeded with `seed`, so every rank running it draws the same bytes (and a
// forward that is a collective stays matched).
std::string generate_bytes(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                           int64_t block_size, int64_t n, uint64_t seed);

}  // namespace heft::train
