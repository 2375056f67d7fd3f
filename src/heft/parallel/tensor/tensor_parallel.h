// Tensor parallelism (Megatron-LM's layers) over a ProcessGroup of T ranks: each layer an
// ordinary torch::nn::Module holding its slice of the full layer's parameters.
//
// Regions. Activations between the layers are either replicated (every rank of the group
// holds the whole tensor) or parallel (each holds its slice of the last dimension). The
// conjugate functions move between them as autograd functions:
//   copy_to_region      replicated -> parallel input: identity forward, all-reduce (sum) of
//                       the gradient backward (Megatron's f)
//   reduce_from_region  partial sums -> replicated: all-reduce forward, identity backward (g)
//   gather_from_region  parallel -> replicated: all-gather of the last dimension forward,
//                       this rank's slice of the gradient backward
// Layers:
//   ColumnParallelLinear(in, out): weight rows (output features) split: rank r holds
//     outputs [r·out/T, (r+1)·out/T); input replicated, output parallel (or gathered).
//   RowParallelLinear(in, out): weight columns (input features) split; input parallel,
//     output all-reduced (replicated), the bias added once after the reduction.
//   VocabParallelEmbedding(vocab, d): rows split; ids outside this rank's rows contribute
//     zeros; one all-reduce makes the sum.
//   vocab_parallel_cross_entropy_sum(logits slice, targets): the cross-entropy of logits
//     split over the vocabulary, summed over positions, without gathering the logits: the
//     max and the sum of exponentials are all-reduced across the group.
// A transformer block (attention: qkv column, output row; MLP: fc column, out row) then
// communicates with two all-reduces forward and two backward (Megatron's count; counters()
// shows it).
//
// Initialisation: build the full layer (same seed on every rank) and keep the slice
// (load_full), so a model at any T starts from the T = 1 model's weights. All ranks of the
// group must call every layer in the same order (they are collectives). T must divide the
// split dimension (heft::InvalidArgument naming it otherwise).
// Deliberately left out: sequence parallelism (the all-gather / reduce-scatter form for
// LayerNorm regions), GPU streams.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "heft/parallel/process_group.h"

namespace heft::parallel::tensor {

// Collectives the functions above issued in this process (all groups), for tests and logs.
struct TensorParallelCounters {
  int64_t forward_allreduces = 0;
  int64_t backward_allreduces = 0;
  int64_t allgathers = 0;
  double seconds = 0;  // wall time inside these collectives (the step's communication)
};
TensorParallelCounters& counters();

torch::Tensor copy_to_region(const torch::Tensor& x, ProcessGroup& group);
torch::Tensor reduce_from_region(const torch::Tensor& x, ProcessGroup& group);
torch::Tensor gather_from_region(const torch::Tensor& x, ProcessGroup& group);

// n / size; throws heft::InvalidArgument naming `what` ("n_head (3) is not divisible by
// tensor_parallel_degree 2") when size does not divide n.
int64_t split_size(int64_t n, int size, const std::string& what);

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in, int64_t out, ProcessGroup& group, bool bias = true,
                           bool gather_output = false);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in) replicated -> (..., out/T | out)
  // Keeps this rank's rows of the full layer's weight (out, in) and bias (out).
  void load_full(const torch::Tensor& weight, const torch::Tensor& bias = {});
  torch::Tensor weight, bias;

 private:
  ProcessGroup& group_;
  bool gather_output_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, ProcessGroup& group, bool bias = true);
  torch::Tensor forward(const torch::Tensor& x);  // (..., in/T) parallel -> (..., out) replicated
  // Keeps this rank's columns of the full weight (out, in); the bias (out) whole.
  void load_full(const torch::Tensor& weight, const torch::Tensor& bias = {});
  torch::Tensor weight, bias;

 private:
  ProcessGroup& group_;
};
TORCH_MODULE(RowParallelLinear);

class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, ProcessGroup& group);
  torch::Tensor forward(const torch::Tensor& ids);  // int64 ids -> (..., dim) replicated
  void load_full(const torch::Tensor& weight);       // (vocab, dim): keeps this rank's rows
  int64_t first_row() const { return first_; }
  torch::Tensor weight;

 private:
  ProcessGroup& group_;
  int64_t first_ = 0, rows_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

// How a tensor-parallel parameter is cut from the full one: along `dim`, in `parts` equal
// blocks each split over the ranks (a fused qkv weight: 3 blocks q, k, v, each rank taking
// its heads' rows of each); dim -1: replicated (every rank holds it whole).
struct Split {
  int dim = -1;
  int parts = 1;
};
// Rank's slice of a full tensor, and the full tensor from every rank's slice (in rank order).
torch::Tensor take_slice(const torch::Tensor& full, Split split, int rank, int size,
                         const std::string& what);
torch::Tensor join_slices(const std::vector<torch::Tensor>& slices, Split split);

// logits: (N, V/T) this rank's vocabulary columns [first, first + V/T); targets (N,) int64
// in [0, V). The sum over N of -log softmax(full logits)[target], the same on every rank.
torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits,
                                               const torch::Tensor& targets, int64_t first,
                                               ProcessGroup& group);

}  // namespace heft::parallel::tensor
