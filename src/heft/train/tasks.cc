// The tasks of task.h. image: Fashion-MNIST classification with cross-entropy, the global
// batch split over data-parallel ranks by DistributedSampler, evaluated on the t10k set.
#include <algorithm>

#include "heft/error.h"
#include "heft/train/distributed_sampler.h"
#include "heft/train/fashion_mnist.h"
#include "heft/train/task.h"
#include "heft/train/text.h"

namespace heft::train {

namespace {

namespace F = torch::nn::functional;

class ImageClassification : public Task {
 public:
  ImageClassification(const Hyperparameters& hp, const std::string& test_dir, int data_rank,
                      int data_size)
      : train_set_(load_fashion_mnist(hp.data, "train")),
        test_set_(hp.eval ? load_fashion_mnist(test_dir, "t10k") : Dataset{}),
        sampler_(options(hp, train_set_, data_rank, data_size)),
        data_rank_(data_rank),
        data_size_(data_size) {}

  int64_t steps_per_epoch() const override { return sampler_.steps_per_epoch(); }
  void set_epoch(int64_t epoch) override { sampler_.set_epoch(epoch); }

  Batch batch(int64_t step) const override {
    const DistributedSampler::Batch share = sampler_.batch(step);
    auto [x, y] = gather_batch(train_set_, share.indices);  // (b,1,28,28), (b,)
    return {x, y, share.global_size, share.global_size};
  }

  torch::Tensor loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) const override {
    return F::cross_entropy(logits, labels, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  }

  // Rank r evaluates the test samples r, r + W, r + 2W, ...; sums are reduced.
  Metrics evaluate(const Forward& forward, parallel::ProcessGroup& data_group) const override {
    double loss = 0, correct = 0, count = 0;
    std::vector<int64_t> mine;
    for (int64_t i = data_rank_; i < test_set_.size(); i += data_size_) mine.push_back(i);
    constexpr size_t kChunk = 1000;
    for (size_t begin = 0; begin < mine.size(); begin += kChunk) {
      std::vector<int64_t> idx(mine.begin() + begin,
                               mine.begin() + std::min(mine.size(), begin + kChunk));
      auto [x, y] = gather_batch(test_set_, idx);
      const torch::Tensor logits = forward(x);
      loss += loss_sum(logits, y).item<double>();
      correct += logits.argmax(1).eq(y).sum().item<double>();
      count += static_cast<double>(idx.size());
    }
    const std::vector<double> s = data_group.sum({loss, correct, count});
    return {{"test_loss", s[0] / s[2]}, {"test_acc", s[1] / s[2]}};
  }

  std::vector<std::string> metric_names() const override { return {"test_acc"}; }

 private:
  static DistributedSampler::Options options(const Hyperparameters& hp, const Dataset& data,
                                             int data_rank, int data_size) {
    DistributedSampler::Options o;
    o.dataset_size = data.size();
    o.global_batch = hp.batch_size;
    o.rank = data_rank;
    o.world_size = data_size;
    o.seed = static_cast<uint64_t>(hp.seed);
    o.limit = hp.limit;
    return o;
  }

  const Dataset train_set_;
  const Dataset test_set_;
  DistributedSampler sampler_;
  const int data_rank_;
  const int data_size_;
};

}  // namespace

std::unique_ptr<Task> make_task(const std::string& name, const Hyperparameters& hp,
                                const std::string& test_dir, int data_rank, int data_size) {
  if (name == "image")
    return std::make_unique<ImageClassification>(hp, test_dir, data_rank, data_size);
  if (name == "text") return make_text_task(hp, data_rank, data_size);
  throw InvalidArgument("unknown task '" + name + "': expected image or text");
}

}  // namespace heft::train
