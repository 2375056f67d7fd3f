#include "heft/train/gpt.h"

#include <cmath>

#include "heft/error.h"

namespace heft::train {

namespace nn = torch::nn;

namespace {

// The causal attention of (B, T, 3·h·hd) fused q, k, v over h heads: (B, T, h·hd).
torch::Tensor causal_attention(const torch::Tensor& qkv_out, int64_t heads) {
  const int64_t B = qkv_out.size(0), T = qkv_out.size(1), C = qkv_out.size(2) / 3,
                hd = C / heads;
  std::vector<torch::Tensor> qkv = qkv_out.split(C, 2);
  for (torch::Tensor& t : qkv) t = t.view({B, T, heads, hd}).transpose(1, 2);
  torch::Tensor att = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(double(hd));
  const torch::Tensor future =
      torch::ones({T, T}, torch::TensorOptions(torch::kBool).device(qkv_out.device())).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  return torch::matmul(att, qkv[2]).transpose(1, 2).contiguous().view({B, T, C});
}

}  // namespace

GptBlock::GptBlock(const GptConfig& c) : n_head_(c.n_head) {
  const int64_t d = c.n_embd;
  ln1_ = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d})));
  qkv_ = register_module("qkv", nn::Linear(d, 3 * d));
  proj_ = register_module("proj", nn::Linear(d, d));
  ln2_ = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d})));
  fc_ = register_module("fc", nn::Linear(d, 4 * d));
  out_ = register_module("out", nn::Linear(4 * d, d));
}

torch::Tensor GptBlock::forward(const torch::Tensor& x) {
  torch::Tensor h = x + proj_->forward(causal_attention(qkv_->forward(ln1_->forward(x)), n_head_));
  return h + out_->forward(torch::gelu(fc_->forward(ln2_->forward(h)), "tanh"));
}

// Layers [first, last] of either GPT (see gpt.h for the numbering).
template <class G>
torch::Tensor gpt_range(G& g, int first, int last, const torch::Tensor& in) {
  const int n = static_cast<int>(g.blocks_.size());
  torch::Tensor x = in;
  for (int layer = first; layer <= last; ++layer) {
    if (layer == 0) {
      const int64_t T = x.size(1);
      if (T > g.config_.block_size)
        throw InvalidArgument("gpt: a sequence of " + std::to_string(T) +
                              " bytes is longer than block_size " +
                              std::to_string(g.config_.block_size));
      x = g.tok_->forward(x) +
          g.pos_->forward(torch::arange(T, torch::TensorOptions(torch::kLong).device(x.device())));
    } else if (layer <= n) {
      auto* block = g.blocks_[static_cast<size_t>(layer - 1)].get();
      x = g.run_unit(static_cast<size_t>(layer - 1), x,
                     [block](const torch::Tensor& v) { return block->forward(v); });
    } else {
      x = g.head_->forward(g.ln_f_->forward(x));
    }
  }
  return x;
}

// Drops every layer not kept: its modules are replaced by empty ones (the
// parameter names of the kept layers stay the full model's).
template <class G>
void gpt_keep(G& g, const std::vector<bool>& kept) {
  const int n = static_cast<int>(g.blocks_.size());
  auto keep = [&](int layer) { return layer < static_cast<int>(kept.size()) && kept[static_cast<size_t>(layer)]; };
  auto empty = [] { return std::make_shared<nn::Module>(); };
  if (!keep(0)) {
    g.replace_module("tok", empty());
    g.replace_module("pos", empty());
    g.tok_ = nullptr;
    g.pos_ = nullptr;
  }
  nn::ModuleList blocks;
  for (int i = 0; i < n; ++i) {
    if (keep(i + 1)) {
      blocks->push_back(g.blocks_[static_cast<size_t>(i)]);
    } else {
      blocks->push_back(empty());
      g.blocks_[static_cast<size_t>(i)] = nullptr;
    }
  }
  g.replace_module("blocks", blocks.ptr());
  if (!keep(n + 1)) {
    g.replace_module("ln", empty());
    g.replace_module("head", empty());
    g.ln_f_ = nullptr;
    g.head_ = nullptr;
  }
}

template <class G>
std::vector<torch::Tensor> gpt_layer_parameters(G& g, int layer) {
  const int n = static_cast<int>(g.blocks_.size());
  std::vector<torch::Tensor> out;
  auto add = [&](const auto& holder) {
    if (!holder.is_empty())
      for (const auto& p : holder->parameters()) out.push_back(p);
  };
  if (layer == 0) {
    add(g.tok_);
    add(g.pos_);
  } else if (layer <= n) {
    if (auto& b = g.blocks_[static_cast<size_t>(layer - 1)])
      for (const auto& p : b->parameters()) out.push_back(p);
  } else {
    add(g.ln_f_);
    add(g.head_);
  }
  return out;
}

std::vector<std::string> gpt_layer_names(int64_t n_layer) {
  std::vector<std::string> names{"embedding"};
  for (int64_t i = 0; i < n_layer; ++i) names.push_back("block." + std::to_string(i));
  names.push_back("head");
  return names;
}

std::vector<std::string> Gpt::layer_names() const { return gpt_layer_names(config_.n_layer); }
torch::Tensor Gpt::forward_range(int first, int last, const torch::Tensor& x) {
  return gpt_range(*this, first, last, x);
}
void Gpt::keep_layers(const std::vector<bool>& keep) { gpt_keep(*this, keep); }
std::vector<torch::Tensor> Gpt::layer_parameters(int layer) { return gpt_layer_parameters(*this, layer); }
torch::Tensor Gpt::sample_input(int64_t batch) const {
  return torch::randint(0, config_.vocab, {batch, config_.block_size}, torch::kLong);
}
std::vector<std::string> TensorParallelGpt::layer_names() const {
  return gpt_layer_names(config_.n_layer);
}
torch::Tensor TensorParallelGpt::forward_range(int first, int last, const torch::Tensor& x) {
  return gpt_range(*this, first, last, x);
}
void TensorParallelGpt::keep_layers(const std::vector<bool>& keep) { gpt_keep(*this, keep); }
std::vector<torch::Tensor> TensorParallelGpt::layer_parameters(int layer) {
  return gpt_layer_parameters(*this, layer);
}
torch::Tensor TensorParallelGpt::sample_input(int64_t batch) const {
  return torch::randint(0, config_.vocab, {batch, config_.block_size}, torch::kLong);
}

Gpt::Gpt(const GptConfig& c) : config_(c) {
  if (c.n_embd % c.n_head != 0)
    throw InvalidArgument("gpt: n_head (" + std::to_string(c.n_head) + ") must divide n_embd (" +
                          std::to_string(c.n_embd) + ")");
  tok_ = register_module("tok", nn::Embedding(c.vocab, c.n_embd));
  pos_ = register_module("pos", nn::Embedding(c.block_size, c.n_embd));
  nn::ModuleList blocks;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks_.push_back(std::make_shared<GptBlock>(c));
    blocks->push_back(blocks_.back());
  }
  register_module("blocks", blocks);
  ln_f_ = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({c.n_embd})));
  head_ = register_module("head", nn::Linear(nn::LinearOptions(c.n_embd, c.vocab).bias(false)));
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    const auto ends_with = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    if (ends_with("bias"))
      p.zero_();
    else if (ends_with("proj.weight") || ends_with("out.weight"))
      p.normal_(0.0, residual_std);
    else if (p.dim() >= 2)
      p.normal_(0.0, 0.02);
  }
}

torch::Tensor Gpt::forward(torch::Tensor idx) {
  return gpt_range(*this, 0, static_cast<int>(config_.n_layer) + 1, idx);
}

std::vector<std::shared_ptr<nn::Module>> Gpt::units() {
  return {blocks_.begin(), blocks_.end()};
}

TensorParallelGptBlock::TensorParallelGptBlock(const GptConfig& c, parallel::ProcessGroup& g)
    : local_heads_(parallel::tensor::split_size(c.n_head, g.size(), "n_head")), rank_(g.rank()), size_(g.size()) {
  const int64_t d = c.n_embd;
  parallel::tensor::split_size(d, g.size(), "n_embd");
  ln1_ = register_module("ln1", nn::LayerNorm(nn::LayerNormOptions({d})));
  qkv_ = register_module("qkv", parallel::tensor::ColumnParallelLinear(d, 3 * d, g));
  proj_ = register_module("proj", parallel::tensor::RowParallelLinear(d, d, g));
  ln2_ = register_module("ln2", nn::LayerNorm(nn::LayerNormOptions({d})));
  fc_ = register_module("fc", parallel::tensor::ColumnParallelLinear(d, 4 * d, g));
  out_ = register_module("out", parallel::tensor::RowParallelLinear(4 * d, d, g));
}

void TensorParallelGptBlock::load_full(GptBlock& full) {
  torch::NoGradGuard no_grad;
  ln1_->weight.copy_(full.ln1_->weight);
  ln1_->bias.copy_(full.ln1_->bias);
  ln2_->weight.copy_(full.ln2_->weight);
  ln2_->bias.copy_(full.ln2_->bias);
  // qkv: this rank's heads' rows of each of q, k and v.
  const auto qkv = parallel::tensor::Split{0, 3};
  qkv_->weight.copy_(parallel::tensor::take_slice(full.qkv_->weight, qkv, rank_, size_, "n_embd"));
  qkv_->bias.copy_(parallel::tensor::take_slice(full.qkv_->bias, qkv, rank_, size_, "n_embd"));
  proj_->load_full(full.proj_->weight, full.proj_->bias);
  fc_->load_full(full.fc_->weight, full.fc_->bias);
  out_->load_full(full.out_->weight, full.out_->bias);
}

torch::Tensor TensorParallelGptBlock::forward(const torch::Tensor& x) {
  torch::Tensor h = x + proj_->forward(causal_attention(qkv_->forward(ln1_->forward(x)), local_heads_));
  return h + out_->forward(torch::gelu(fc_->forward(ln2_->forward(h)), "tanh"));
}

TensorParallelGpt::TensorParallelGpt(const GptConfig& c, parallel::ProcessGroup& group)
    : config_(c), group_(group) {
  parallel::tensor::split_size(c.vocab, group.size(), "vocab");
  Gpt full(c);  // the T = 1 model from the current seed: every T starts from its weights
  tok_ = register_module("tok", parallel::tensor::VocabParallelEmbedding(c.vocab, c.n_embd, group));
  pos_ = register_module("pos", nn::Embedding(c.block_size, c.n_embd));
  nn::ModuleList blocks;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    blocks_.push_back(std::make_shared<TensorParallelGptBlock>(c, group));
    blocks->push_back(blocks_.back());
  }
  register_module("blocks", blocks);
  ln_f_ = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({c.n_embd})));
  head_ = register_module(
      "head", parallel::tensor::ColumnParallelLinear(c.n_embd, c.vocab, group, /*bias=*/false));
  torch::NoGradGuard no_grad;
  tok_->load_full(full.tok_->weight);
  pos_->weight.copy_(full.pos_->weight);
  for (size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->load_full(*full.blocks_[i]);
  ln_f_->weight.copy_(full.ln_f_->weight);
  ln_f_->bias.copy_(full.ln_f_->bias);
  head_->load_full(full.head_->weight);
}

torch::Tensor TensorParallelGpt::forward(torch::Tensor idx) {
  return gpt_range(*this, 0, static_cast<int>(config_.n_layer) + 1, idx);  // (B, T, 256/T)
}

std::vector<std::shared_ptr<nn::Module>> TensorParallelGpt::units() {
  return {blocks_.begin(), blocks_.end()};
}

std::map<std::string, parallel::tensor::Split> TensorParallelGpt::tensor_splits() const {
  using parallel::tensor::Split;
  std::map<std::string, Split> s{{"tok.weight", {0, 1}}, {"head.weight", {0, 1}}};
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    s[b + "qkv.weight"] = {0, 3};
    s[b + "qkv.bias"] = {0, 3};
    s[b + "proj.weight"] = {1, 1};
    s[b + "fc.weight"] = {0, 1};
    s[b + "fc.bias"] = {0, 1};
    s[b + "out.weight"] = {1, 1};
  }
  return s;
}

torch::Tensor TensorParallelGpt::loss_sum(const torch::Tensor& logits, const torch::Tensor& targets) {
  return parallel::tensor::vocab_parallel_cross_entropy_sum(
      logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
      group_.rank() * (config_.vocab / group_.size()), group_);
}

torch::Tensor TensorParallelGpt::full_outputs(const torch::Tensor& logits) {
  return parallel::tensor::gather_from_region(logits, group_);
}

std::string generate_bytes(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                           int64_t block_size, int64_t n, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(seed);
  std::vector<int64_t> context{'\n'};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const size_t from = context.size() > static_cast<size_t>(block_size)
                            ? context.size() - static_cast<size_t>(block_size)
                            : 0;
    std::vector<int64_t> window(context.begin() + static_cast<std::ptrdiff_t>(from), context.end());
    const torch::Tensor ids = torch::tensor(window, torch::kLong).unsqueeze(0);
    const torch::Tensor logits = forward(ids).select(1, ids.size(1) - 1).squeeze(0);  // (256,)
    const torch::Tensor probs = logits.to(torch::kFloat).softmax(-1);
    const int64_t next = torch::multinomial(probs, 1, false, generator).item<int64_t>();
    context.push_back(next);
    out.push_back(static_cast<char>(next));
  }
  return out;
}

}  // namespace heft::train
