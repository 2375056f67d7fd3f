#include "heft/parallel/tensor/tensor_parallel.h"

#include <chrono>
#include <cmath>

#include "heft/error.h"

namespace heft::parallel::tensor {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void keep_group(AutogradContext* ctx, ProcessGroup& group) {
  ctx->saved_data["group"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(&group));
}
ProcessGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<ProcessGroup*>(static_cast<intptr_t>(ctx->saved_data["group"].toInt()));
}

// Adds the wall time of its scope to counters().seconds.
struct Timed {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~Timed() {
    counters().seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

torch::Tensor allreduce(const torch::Tensor& x, ProcessGroup& group, bool forward) {
  torch::Tensor out = x.contiguous().clone();
  Timed timed;
  if (group.size() > 1) group.allreduce(out, comm::ReduceOp::sum);
  ++(forward ? counters().forward_allreduces : counters().backward_allreduces);
  return out;
}

// Identity forward, all-reduce backward.
struct CopyToRegion : torch::autograd::Function<CopyToRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, ProcessGroup* g) {
    keep_group(ctx, *g);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {allreduce(grad[0], group_of(ctx), false), torch::Tensor()};
  }
};

// All-reduce forward, identity backward.
struct ReduceFromRegion : torch::autograd::Function<ReduceFromRegion> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, ProcessGroup* g) {
    return allreduce(x, *g, true);
  }
  static variable_list backward(AutogradContext*, variable_list grad) {
    return {grad[0], torch::Tensor()};
  }
};

// All-gather of the last dimension forward, this rank's slice backward.
struct GatherFromRegion : torch::autograd::Function<GatherFromRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, ProcessGroup* g) {
    keep_group(ctx, *g);
    ++counters().allgathers;
    if (g->size() == 1) return x.clone();
    Timed timed;
    // (T, ..., n) gathered, then the blocks laid side by side along the last dimension.
    const torch::Tensor all = g->allgather(x.contiguous());
    std::vector<torch::Tensor> blocks = all.unbind(0);
    return torch::cat(blocks, -1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    ProcessGroup& g = group_of(ctx);
    const int64_t n = grad[0].size(-1) / g.size();
    return {grad[0].narrow(-1, g.rank() * n, n).contiguous(), torch::Tensor()};
  }
};

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits_in,
                               const torch::Tensor& targets, int64_t first, ProcessGroup* g) {
    const torch::Tensor logits = logits_in.to(torch::kFloat);
    const int64_t n = logits.size(1);
    torch::Tensor max = std::get<0>(logits.max(1)).contiguous();  // (N,)
    if (g->size() > 1) {
      Timed timed;
      g->allreduce(max, comm::ReduceOp::max);
    }
    const torch::Tensor shifted = logits - max.unsqueeze(1);
    torch::Tensor exp = shifted.exp();
    torch::Tensor sums = torch::stack({exp.sum(1), torch::zeros({logits.size(0)})}, 1);  // (N, 2)
    const torch::Tensor local = targets - first;
    const torch::Tensor mine = (local >= 0).logical_and(local < n);
    const torch::Tensor index = local.clamp(0, n - 1);
    const torch::Tensor picked = shifted.gather(1, index.unsqueeze(1)).squeeze(1) * mine;
    sums.select(1, 1).copy_(picked);
    sums = sums.contiguous();
    if (g->size() > 1) {
      Timed timed;
      g->allreduce(sums, comm::ReduceOp::sum);
    }
    counters().forward_allreduces += 2;
    const torch::Tensor sum_exp = sums.select(1, 0), target_logit = sums.select(1, 1);
    const torch::Tensor loss = (sum_exp.log() - target_logit).sum();
    exp.div_(sum_exp.unsqueeze(1));  // the softmax of this rank's columns
    ctx->save_for_backward({exp, index, mine});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits_in.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    torch::Tensor g = saved[0].clone();  // softmax
    g.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(g.scalar_type()).unsqueeze(1));
    g.mul_(grad[0]);
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TensorParallelCounters& counters() {
  static TensorParallelCounters c;
  return c;
}

torch::Tensor copy_to_region(const torch::Tensor& x, ProcessGroup& group) {
  return CopyToRegion::apply(x, &group);
}
torch::Tensor reduce_from_region(const torch::Tensor& x, ProcessGroup& group) {
  return ReduceFromRegion::apply(x, &group);
}
torch::Tensor gather_from_region(const torch::Tensor& x, ProcessGroup& group) {
  return GatherFromRegion::apply(x, &group);
}

torch::Tensor take_slice(const torch::Tensor& full, Split split, int rank, int size,
                         const std::string& what) {
  if (split.dim < 0 || size == 1) return full;
  const int64_t n = full.size(split.dim);
  if (n % (split.parts * size) != 0)
    throw InvalidArgument(what + " (" + std::to_string(n) + ") is not divisible by " +
                          (split.parts > 1 ? std::to_string(split.parts) + " x " : "") +
                          "tensor_parallel_degree " + std::to_string(size));
  const int64_t block = n / split.parts, each = block / size;
  std::vector<torch::Tensor> pieces;
  for (int j = 0; j < split.parts; ++j)
    pieces.push_back(full.narrow(split.dim, j * block + rank * each, each));
  return split.parts == 1 ? pieces[0] : torch::cat(pieces, split.dim);
}

torch::Tensor join_slices(const std::vector<torch::Tensor>& slices, Split split) {
  if (split.dim < 0 || slices.size() == 1) return slices.at(0);
  const int64_t each = slices[0].size(split.dim) / split.parts;
  std::vector<torch::Tensor> pieces;
  for (int j = 0; j < split.parts; ++j)
    for (const torch::Tensor& s : slices) pieces.push_back(s.narrow(split.dim, j * each, each));
  return torch::cat(pieces, split.dim);
}

int64_t split_size(int64_t n, int size, const std::string& what) {
  if (n % size != 0)
    throw InvalidArgument(what + " (" + std::to_string(n) + ") is not divisible by "
                          "tensor_parallel_degree " + std::to_string(size));
  return n / size;
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, ProcessGroup& group,
                                                   bool with_bias, bool gather_output)
    : group_(group), gather_output_(gather_output) {
  const int64_t rows = split_size(out, group.size(), "output features");
  weight = register_parameter("weight", torch::empty({rows, in}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) bias = register_parameter("bias", torch::zeros({rows}));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::nn::functional::linear(copy_to_region(x, group_), weight, bias);
  return gather_output_ ? gather_from_region(y, group_) : y;
}

void ColumnParallelLinearImpl::load_full(const torch::Tensor& w, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  weight.copy_(take_slice(w, {0, 1}, group_.rank(), group_.size(), "output features"));
  if (bias.defined() && b.defined()) bias.copy_(take_slice(b, {0, 1}, group_.rank(), group_.size(), "output features"));
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, ProcessGroup& group,
                                             bool with_bias)
    : group_(group) {
  const int64_t cols = split_size(in, group.size(), "input features");
  weight = register_parameter("weight", torch::empty({out, cols}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = reduce_from_region(torch::nn::functional::linear(x, weight), group_);
  return bias.defined() ? y + bias : y;
}

void RowParallelLinearImpl::load_full(const torch::Tensor& w, const torch::Tensor& b) {
  torch::NoGradGuard no_grad;
  weight.copy_(take_slice(w, {1, 1}, group_.rank(), group_.size(), "input features"));
  if (bias.defined() && b.defined()) bias.copy_(b);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim,
                                                       ProcessGroup& group)
    : group_(group) {
  rows_ = split_size(vocab, group.size(), "the vocabulary");
  first_ = group.rank() * rows_;
  weight = register_parameter("weight", torch::randn({rows_, dim}));
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  const torch::Tensor local = ids - first_;
  const torch::Tensor mine = (local >= 0).logical_and(local < rows_);
  torch::Tensor out = torch::embedding(weight, local.clamp(0, rows_ - 1)) *
                      mine.unsqueeze(-1).to(weight.scalar_type());
  return reduce_from_region(out, group_);
}

void VocabParallelEmbeddingImpl::load_full(const torch::Tensor& w) {
  torch::NoGradGuard no_grad;
  weight.copy_(take_slice(w, {0, 1}, group_.rank(), group_.size(), "the vocabulary"));
}

torch::Tensor vocab_parallel_cross_entropy_sum(const torch::Tensor& logits,
                                               const torch::Tensor& targets, int64_t first,
                                               ProcessGroup& group) {
  return VocabParallelCrossEntropy::apply(logits, targets, first, &group);
}

}  // namespace heft::parallel::tensor
