#include "heft/train/text.h"

#include "heft/error.h"
#include "heft/train/distributed_sampler.h"

namespace heft::train {

namespace {

class TextTask : public Task {
 public:
  TextTask(const Hyperparameters& hp, int data_rank, int data_size)
      : corpus_(load_text_corpus(hp.data, hp.block_size)),
        block_(hp.block_size),
        batch_size_(hp.batch_size),
        seed_(static_cast<uint64_t>(hp.seed)),
        data_rank_(data_rank),
        data_size_(data_size) {
    if (batch_size_ < data_size_)
      throw InvalidArgument("batch_size (" + std::to_string(batch_size_) +
                            ") must be at least the number of data-parallel ranks (" +
                            std::to_string(data_size_) + ")");
    steps_ = std::max<int64_t>(1, corpus_.train.size(0) / (batch_size_ * block_));
  }

  int64_t steps_per_epoch() const override { return steps_; }
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

  Batch batch(int64_t step) const override {
    auto [x, y] = parallel::data::text_batch(corpus_.train, block_, batch_size_, seed_, epoch_,
                                             step, data_rank_, data_size_);
    return {x, y, batch_size_, batch_size_ * block_};
  }

  torch::Tensor loss_sum(const torch::Tensor& logits, const torch::Tensor& targets) const override {
    namespace F = torch::nn::functional;
    return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat),
                            targets.reshape({-1}),
                            F::CrossEntropyFuncOptions().reduction(torch::kSum));
  }

  Metrics evaluate(const Forward& forward, parallel::ProcessGroup& data_group) const override {
    constexpr int64_t kWindows = 32;
    const std::vector<int64_t> all =
        window_offsets(corpus_.held_out.size(0), block_ + 1, kWindows, 12345);
    const auto [begin, end] = DistributedSampler::share(kWindows, data_rank_, data_size_);
    double loss = 0;
    if (end > begin) {
      auto [x, y] = windows(corpus_.held_out, {all.begin() + begin, all.begin() + end});
      loss = loss_sum(forward(x), y).item<double>();
    } else {
      // A rank without windows still joins the forward (it may be a collective).
      auto [x, y] = windows(corpus_.held_out, {all.front()});
      forward(x);
    }
    return {{"val_loss", data_group.sum({loss})[0] / static_cast<double>(kWindows * block_)}};
  }

  std::vector<std::string> metric_names() const override { return {"val_loss"}; }
  int64_t tokens_per_sample() const override { return block_; }

 private:
  std::pair<torch::Tensor, torch::Tensor> windows(const torch::Tensor& text,
                                                  const std::vector<int64_t>& offsets) const {
    return parallel::data::windows(text, offsets, block_);
  }

  const TextCorpus corpus_;
  const int64_t block_, batch_size_;
  const uint64_t seed_;
  const int data_rank_, data_size_;
  int64_t steps_ = 1, epoch_ = 0;
};

}  // namespace

std::unique_ptr<Task> make_text_task(const Hyperparameters& hp, int data_rank, int data_size) {
  return std::make_unique<TextTask>(hp, data_rank, data_size);
}

}  // namespace heft::train
