#include "heft/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "heft/error.h"
#include "heft/parallel/data/distributed_data_parallel.h"
#include "heft/train/distributed_sampler.h"
#include "heft/train/fashion_mnist.h"
#include "heft/train/models.h"
#include "heft/train/optimizer.h"

namespace heft::train {

namespace {

namespace F = torch::nn::functional;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Sums `values` over the ranks (float64).
std::vector<double> sum_over_ranks(parallel::ProcessGroup& group, std::vector<double> values) {
  torch::Tensor t = torch::tensor(values, torch::kDouble);
  group.allreduce(t, comm::ReduceOp::sum);
  auto a = t.accessor<double, 1>();
  for (size_t i = 0; i < values.size(); ++i) values[i] = a[static_cast<int64_t>(i)];
  return values;
}

struct EvalResult {
  double loss = 0;
  double accuracy = 0;
};

// Rank r evaluates the test samples r, r + W, r + 2W, ...; sums are reduced.
EvalResult evaluate(Classifier& model, const Dataset& test, parallel::ProcessGroup& group) {
  torch::NoGradGuard no_grad;
  model.eval();
  double loss = 0, correct = 0, count = 0;
  std::vector<int64_t> mine;
  for (int64_t i = group.rank(); i < test.size(); i += group.size()) mine.push_back(i);
  constexpr size_t kChunk = 1000;
  for (size_t begin = 0; begin < mine.size(); begin += kChunk) {
    std::vector<int64_t> idx(mine.begin() + begin,
                             mine.begin() + std::min(mine.size(), begin + kChunk));
    auto [x, y] = gather_batch(test, idx);
    torch::Tensor logits = model.forward(x);
    loss += F::cross_entropy(logits, y, F::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += logits.argmax(1).eq(y).sum().item<double>();
    count += static_cast<double>(idx.size());
  }
  model.train();
  const std::vector<double> s = sum_over_ranks(group, {loss, correct, count});
  return {s[0] / s[2], s[1] / s[2]};
}

void save_model(Classifier& model, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
  torch::serialize::OutputArchive archive;
  model.save(archive);
  archive.save_to(dir + "/model.pt");
}

parallel::data::DistributedDataParallelOptions ddp_options(const Hyperparameters& hp) {
  parallel::data::DistributedDataParallelOptions o;
  o.bucket_bytes = static_cast<size_t>(hp.bucket_mb * (1 << 20));
  o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
  o.bf16_compression = hp.bf16_compression;
  return o;
}

DistributedSampler::Options sampler_options(const Hyperparameters& hp, const Dataset& data,
                                            const parallel::ProcessGroup& group) {
  DistributedSampler::Options o;
  o.dataset_size = data.size();
  o.global_batch = hp.batch_size;
  o.rank = group.rank();
  o.world_size = group.size();
  o.seed = static_cast<uint64_t>(hp.seed);
  o.limit = hp.limit;
  return o;
}

OptimizerConfig optimizer_config(const Hyperparameters& hp, int world, int64_t steps_per_epoch) {
  OptimizerConfig c;
  c.name = hp.optimizer;
  c.lr = hp.lr * (hp.scale_lr ? world : 1);
  c.momentum = hp.momentum;
  c.weight_decay = hp.weight_decay;
  c.warmup_steps = hp.warmup_steps;
  c.schedule = hp.lr_schedule;
  c.total_steps = hp.epochs * steps_per_epoch;
  if (hp.max_steps > 0) c.total_steps = std::min(c.total_steps, hp.max_steps);
  return c;
}

// One run of train(): the replicated model and what the loop counts. Only rank 0 prints.
class Training {
 public:
  Training(const Hyperparameters& hp, const std::string& test_dir, parallel::ProcessGroup& group,
           std::ostream& out)
      : hp_(hp),
        group_(group),
        out_(out),
        train_set_(load_fashion_mnist(hp.data, "train")),
        test_set_(hp.eval ? load_fashion_mnist(test_dir, "t10k") : Dataset{}),
        // Seeded first, so every rank builds the same model (DDP broadcasts rank 0's anyway).
        model_((torch::manual_seed(static_cast<uint64_t>(hp.seed)), make_model(hp.model))),
        ddp_(model_, group, ddp_options(hp)),
        sampler_(sampler_options(hp, train_set_, group)),
        optimizer_config_(optimizer_config(hp, group.size(), sampler_.steps_per_epoch())),
        optimizer_(make_optimizer(optimizer_config_, model_->parameters())) {
    result_.test_acc = std::numeric_limits<double>::quiet_NaN();
  }

  TrainResult run() {
    group_.barrier();  // start the clock together
    bool done = false;
    for (int64_t epoch = 1; epoch <= hp_.epochs && !done; ++epoch) {
      sampler_.set_epoch(epoch - 1);
      const Clock::time_point t0 = Clock::now();
      for (int64_t i = 0; i < sampler_.steps_per_epoch() && !done; ++i) {
        const DistributedSampler::Batch batch = sampler_.batch(i);
        const double lr = learning_rate(optimizer_config_, step_);
        const torch::Tensor loss_sum = train_step(batch, lr);
        done = hp_.max_steps > 0 && step_ >= hp_.max_steps;
        const bool last = done || (epoch == hp_.epochs && i + 1 == sampler_.steps_per_epoch());
        if (step_ % hp_.log_every == 0 || last)
          log_step(epoch, lr, loss_sum, batch.global_size, seconds_ + seconds_since(t0));
      }
      seconds_ += seconds_since(t0);
      if (hp_.eval) log_evaluation(epoch);
    }
    result_.steps = step_;
    result_.seconds = seconds_;
    result_.samples_per_s = static_cast<double>(samples_) / seconds_;
    if (group_.rank() == 0) {
      print("final: step=%lld loss=%.4f test_acc=%.4f samples_per_s=%.1f seconds=%.2f",
            static_cast<long long>(step_), result_.loss, result_.test_acc, result_.samples_per_s,
            result_.seconds);
      if (!hp_.model_dir.empty()) save_model(*model_, hp_.model_dir);
    }
    return result_;
  }

 private:
  // One optimizer step on this rank's share; returns the share's summed loss.
  torch::Tensor train_step(const DistributedSampler::Batch& batch, double lr) {
    set_learning_rate(*optimizer_, lr);
    auto [x, y] = gather_batch(train_set_, batch.indices);  // (b,1,28,28), (b,)
    // Undefined grads: autograd hands its gradient over instead of adding it to zeros.
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    torch::Tensor loss_sum = F::cross_entropy(model_->forward(x), y,
                                              F::CrossEntropyFuncOptions().reduction(torch::kSum));
    // The global batch's mean times the world size: DDP's average over ranks then gives the
    // gradient of the global mean, whatever this rank's share.
    (loss_sum * (static_cast<double>(group_.size()) / static_cast<double>(batch.global_size)))
        .backward();
    optimizer_->step();
    ++step_;
    samples_ += batch.global_size;
    return loss_sum;
  }

  // Reduces the step's loss (collective) and prints its step= line.
  void log_step(int64_t epoch, double lr, const torch::Tensor& loss_sum, int64_t global_size,
                double now) {
    result_.loss =
        sum_over_ranks(group_, {loss_sum.item<double>()})[0] / static_cast<double>(global_size);
    if (group_.rank() == 0)
      print("step=%lld epoch=%lld loss=%.4f lr=%.6g samples_per_s=%.1f",
            static_cast<long long>(step_), static_cast<long long>(epoch), result_.loss, lr,
            static_cast<double>(samples_ - samples_at_log_) / (now - seconds_at_log_));
    seconds_at_log_ = now;
    samples_at_log_ = samples_;
  }

  void log_evaluation(int64_t epoch) {
    const EvalResult e = evaluate(*model_, test_set_, group_);
    result_.test_acc = e.accuracy;
    if (group_.rank() == 0)
      print("epoch=%lld test_loss=%.4f test_acc=%.4f", static_cast<long long>(epoch), e.loss,
            e.accuracy);
  }

  template <typename... Args>
  void print(const char* format, Args... args) {
    char line[256];
    std::snprintf(line, sizeof(line), format, args...);
    out_ << line << std::endl;
  }

  const Hyperparameters& hp_;
  parallel::ProcessGroup& group_;
  std::ostream& out_;
  const Dataset train_set_;
  const Dataset test_set_;
  std::shared_ptr<Classifier> model_;
  parallel::data::DistributedDataParallel ddp_;
  DistributedSampler sampler_;
  const OptimizerConfig optimizer_config_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  TrainResult result_;
  int64_t step_ = 0, samples_ = 0, samples_at_log_ = 0;
  double seconds_ = 0, seconds_at_log_ = 0;  // training time so far; at the last step= line
};

}  // namespace

TrainResult train(const Hyperparameters& hp, const std::string& test_dir,
                  parallel::ProcessGroup& group, std::ostream& out) {
  return Training(hp, test_dir, group, out).run();
}

}  // namespace heft::train
