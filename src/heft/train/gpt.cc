#include "heft/train/gpt.h"

#include <cmath>

#include "heft/error.h"

namespace heft::train {

namespace nn = torch::nn;

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
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), hd = C / n_head_;
  std::vector<torch::Tensor> qkv = qkv_->forward(ln1_->forward(x)).split(C, 2);
  for (torch::Tensor& t : qkv) t = t.view({B, T, n_head_, hd}).transpose(1, 2);  // (B,h,T,hd)
  torch::Tensor att = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(double(hd));
  const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  torch::Tensor y = torch::matmul(att, qkv[2]).transpose(1, 2).contiguous().view({B, T, C});
  torch::Tensor h = x + proj_->forward(y);
  return h + out_->forward(torch::gelu(fc_->forward(ln2_->forward(h)), "tanh"));
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
  const int64_t T = idx.size(1);
  if (T > config_.block_size)
    throw InvalidArgument("gpt: a sequence of " + std::to_string(T) +
                          " bytes is longer than block_size " +
                          std::to_string(config_.block_size));
  torch::Tensor x = tok_->forward(idx) + pos_->forward(torch::arange(T, torch::kLong));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    GptBlock* block = blocks_[i].get();
    x = run_unit(i, x, [block](const torch::Tensor& in) { return block->forward(in); });
  }
  return head_->forward(ln_f_->forward(x));
}

std::vector<std::shared_ptr<nn::Module>> Gpt::units() {
  return {blocks_.begin(), blocks_.end()};
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
