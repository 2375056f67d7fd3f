#include "heft/train/text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "heft/error.h"
#include "heft/train/distributed_sampler.h"

namespace heft::train {

namespace fs = std::filesystem;

TextCorpus load_text_corpus(const std::string& dir, int64_t block_size) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string ext = p.extension().string();
    if (ext == ".dat" || ext == ".u8" || it->is_symlink() || !it->is_regular_file()) continue;
    files.push_back(p);
  }
  if (ec) throw IoError("text data " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::string bytes;
  for (const fs::path& p : files) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream os;
    os << in.rdbuf();
    if (!in) throw IoError("text data: cannot read " + p.string());
    bytes += os.str();
  }
  if (bytes.empty())
    throw IoError("text data " + dir +
                  ": no text files (expected plain files other than *.dat and *.u8; the "
                  "Debian package fortunes installs them in " +
                  std::string(kDefaultFortunesDir) + ")");
  const auto n = static_cast<int64_t>(bytes.size());
  const int64_t cut = n * 9 / 10;
  if (cut < block_size + 1 || n - cut < block_size + 1)
    throw InvalidArgument("text data " + dir + ": " + std::to_string(n) +
                          " bytes are too few for windows of block_size + 1 = " +
                          std::to_string(block_size + 1) + " bytes in both the training 90% "
                          "and the held-out 10%");
  torch::Tensor all = torch::empty({n}, torch::kUInt8);
  std::memcpy(all.data_ptr(), bytes.data(), bytes.size());
  all = all.to(torch::kLong);
  return {all.narrow(0, 0, cut).clone(), all.narrow(0, cut, n - cut).clone()};
}

std::vector<int64_t> window_offsets(int64_t size, int64_t window, int64_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, size - window);
  std::vector<int64_t> out(static_cast<size_t>(count));
  for (int64_t& o : out) o = pick(rng);
  return out;
}

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
    // (seed, epoch, step) mixed into one seed (splitmix64's constants).
    uint64_t s = seed_ * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(epoch_) << 32) ^
                 static_cast<uint64_t>(step);
    s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ull;
    const std::vector<int64_t> all =
        window_offsets(corpus_.train.size(0), block_ + 1, batch_size_, s ^ (s >> 31));
    const auto [begin, end] = DistributedSampler::share(batch_size_, data_rank_, data_size_);
    auto [x, y] = windows(corpus_.train, {all.begin() + begin, all.begin() + end});
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
    std::vector<torch::Tensor> rows;
    rows.reserve(offsets.size());
    for (int64_t o : offsets) rows.push_back(text.narrow(0, o, block_ + 1));
    const torch::Tensor w = torch::stack(rows);  // (b, block + 1)
    return {w.narrow(1, 0, block_).contiguous(), w.narrow(1, 1, block_).contiguous()};
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
