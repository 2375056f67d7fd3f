#include "heft/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
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
           std::ostream& out, const std::atomic<bool>* stop)
      : hp_(hp),
        stop_(stop),
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
    if (!hp_.checkpoint_dir.empty()) resume();
    group_.barrier();  // start the clock together
    bool done = hp_.max_steps > 0 && step_ >= hp_.max_steps;
    for (int64_t epoch = epoch_; epoch <= hp_.epochs && !done; ++epoch) {
      sampler_.set_epoch(epoch - 1);
      const Clock::time_point t0 = Clock::now();
      for (int64_t i = next_batch_; i < sampler_.steps_per_epoch() && !done; ++i) {
        const DistributedSampler::Batch batch = sampler_.batch(i);
        const double lr = learning_rate(optimizer_config_, step_);
        const torch::Tensor loss_sum = train_step(batch, lr);
        done = hp_.max_steps > 0 && step_ >= hp_.max_steps;
        const bool last = done || (epoch == hp_.epochs && i + 1 == sampler_.steps_per_epoch());
        if (step_ % hp_.log_every == 0 || last)
          log_step(epoch, lr, loss_sum, batch.global_size, seconds_ + seconds_since(t0));
        epoch_ = epoch;
        next_batch_ = i + 1;
        result_.stopped = stop_agreed();
        if (result_.stopped || (hp_.checkpoint_every > 0 && step_ % hp_.checkpoint_every == 0))
          checkpoint();
        done = done || result_.stopped;
      }
      seconds_ += seconds_since(t0);
      if (result_.stopped) break;
      if (hp_.eval) log_evaluation(epoch);
      if (next_batch_ == sampler_.steps_per_epoch()) {  // not when max_steps cut it short
        epoch_ = epoch + 1;
        next_batch_ = 0;
      }
    }
    result_.steps = step_;
    result_.seconds = seconds_;
    result_.samples_per_s = static_cast<double>(samples_) / seconds_;
    if (result_.stopped) return result_;
    checkpoint();
    if (group_.rank() == 0) {
      print("final: step=%lld loss=%.4f test_acc=%.4f samples_per_s=%.1f seconds=%.2f",
            static_cast<long long>(step_), result_.loss, result_.test_acc, result_.samples_per_s,
            result_.seconds);
      if (!hp_.model_dir.empty()) save_model(*model_, hp_.model_dir);
    }
    return result_;
  }

 private:
  // Whether any rank was asked to stop (a collective when there are several ranks).
  bool stop_agreed() {
    if (!stop_) return false;
    const double mine = stop_->load() ? 1.0 : 0.0;
    if (group_.size() == 1) return mine > 0;
    return sum_over_ranks(group_, {mine})[0] > 0;
  }

  // Rank 0 saves the state at the current step boundary (once per step).
  void checkpoint() {
    if (hp_.checkpoint_dir.empty() || step_ == saved_step_) return;
    saved_step_ = step_;
    if (group_.rank() != 0) return;
    parallel::CheckpointData data;
    data.step = step_;
    nlohmann::json meta = {{"step", step_}, {"epoch", epoch_}, {"next_batch", next_batch_}};
    // NaN is not JSON; the loss of a step without a step= line is not needed again.
    if (std::isfinite(result_.loss)) meta["loss"] = result_.loss;
    if (std::isfinite(result_.test_acc)) meta["test_acc"] = result_.test_acc;
    data.meta_json = meta.dump();
    data.files["model.pt"] = parallel::module_to_bytes(*model_);
    data.files["optimizer.pt"] = parallel::optimizer_to_bytes(*optimizer_);
    data.files["rng.pt"] = parallel::rng_to_bytes();
    checkpoints().save(data);
  }

  // Every rank loads the newest valid checkpoint, if any.
  void resume() {
    std::optional<parallel::CheckpointData> data = checkpoints().load_latest(std::cerr);
    if (!data) return;
    const nlohmann::json meta = nlohmann::json::parse(data->meta_json);
    for (const char* name : {"model.pt", "optimizer.pt", "rng.pt"})
      if (!data->files.count(name))
        throw IoError("checkpoint step " + std::to_string(data->step) + " in " +
                      hp_.checkpoint_dir + " has no " + name);
    parallel::module_from_bytes(*model_, data->files.at("model.pt"));
    parallel::optimizer_from_bytes(*optimizer_, data->files.at("optimizer.pt"));
    parallel::rng_from_bytes(data->files.at("rng.pt"));
    step_ = saved_step_ = meta.at("step").get<int64_t>();
    epoch_ = meta.at("epoch").get<int64_t>();
    next_batch_ = meta.at("next_batch").get<int64_t>();
    result_.loss = meta.value("loss", std::numeric_limits<double>::quiet_NaN());
    result_.test_acc = meta.value("test_acc", std::numeric_limits<double>::quiet_NaN());
    result_.resumed_from = step_;
    if (group_.rank() == 0)
      print("resumed: step=%lld epoch=%lld", static_cast<long long>(step_),
            static_cast<long long>(epoch_));
  }

  parallel::CheckpointDirectory checkpoints() const {
    const int keep = hp_.checkpoint_keep > 0 ? static_cast<int>(hp_.checkpoint_keep) : 2;
    return parallel::CheckpointDirectory(hp_.checkpoint_dir, keep);
  }

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
  const std::atomic<bool>* stop_;
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
  // Where the next step is: 1-based epoch, 0-based batch within it; the last saved step.
  int64_t epoch_ = 1, next_batch_ = 0, saved_step_ = -1;
  double seconds_ = 0, seconds_at_log_ = 0;  // training time so far; at the last step= line
};

}  // namespace

TrainResult train(const Hyperparameters& hp, const std::string& test_dir,
                  parallel::ProcessGroup& group, std::ostream& out,
                  const std::atomic<bool>* stop) {
  return Training(hp, test_dir, group, out, stop).run();
}

}  // namespace heft::train
