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

}  // namespace

TrainResult train(const Hyperparameters& hp, const std::string& test_dir,
                  parallel::ProcessGroup& group, std::ostream& out) {
  const int world = group.size();
  const bool leader = group.rank() == 0;
  const Dataset train_set = load_fashion_mnist(hp.data, "train");
  const Dataset test_set = hp.eval ? load_fashion_mnist(test_dir, "t10k") : Dataset{};

  torch::manual_seed(static_cast<uint64_t>(hp.seed));
  std::shared_ptr<Classifier> model = make_model(hp.model);
  parallel::data::DistributedDataParallelOptions ddp_options;
  ddp_options.bucket_bytes = static_cast<size_t>(hp.bucket_mb * (1 << 20));
  ddp_options.first_bucket_bytes = std::min(ddp_options.first_bucket_bytes,
                                            ddp_options.bucket_bytes);
  ddp_options.bf16_compression = hp.bf16_compression;
  parallel::data::DistributedDataParallel ddp(model, group, ddp_options);

  OptimizerConfig oc;
  oc.name = hp.optimizer;
  oc.lr = hp.lr * (hp.scale_lr ? world : 1);
  oc.momentum = hp.momentum;
  oc.weight_decay = hp.weight_decay;
  oc.warmup_steps = hp.warmup_steps;

  DistributedSampler::Options so;
  so.dataset_size = train_set.size();
  so.global_batch = hp.batch_size;
  so.rank = group.rank();
  so.world_size = world;
  so.seed = static_cast<uint64_t>(hp.seed);
  so.limit = hp.limit;
  DistributedSampler sampler(so);
  oc.schedule = hp.lr_schedule;
  oc.total_steps = hp.epochs * sampler.steps_per_epoch();
  if (hp.max_steps > 0) oc.total_steps = std::min(oc.total_steps, hp.max_steps);
  std::unique_ptr<torch::optim::Optimizer> optimizer = make_optimizer(oc, model->parameters());

  TrainResult result;
  result.test_acc = std::numeric_limits<double>::quiet_NaN();
  group.barrier();  // start the clock together
  double train_seconds = 0, seconds_at_log = 0;
  int64_t samples = 0, samples_at_log = 0;
  int64_t step = 0;
  bool done = false;
  for (int64_t epoch = 1; epoch <= hp.epochs && !done; ++epoch) {
    sampler.set_epoch(epoch - 1);
    Clock::time_point t0 = Clock::now();
    for (int64_t i = 0; i < sampler.steps_per_epoch(); ++i) {
      const DistributedSampler::Batch batch = sampler.batch(i);
      const double lr = learning_rate(oc, step);
      set_learning_rate(*optimizer, lr);
      auto [x, y] = gather_batch(train_set, batch.indices);
      // Undefined grads: autograd hands its gradient over instead of adding it to zeros.
      for (torch::Tensor& p : model->parameters()) p.mutable_grad().reset();
      torch::Tensor loss_sum =
          F::cross_entropy(model->forward(x), y, F::CrossEntropyFuncOptions().reduction(torch::kSum));
      // mean over the global batch, times world size: DDP's average over ranks then gives
      // the global mean's gradient.
      (loss_sum * (static_cast<double>(world) / static_cast<double>(batch.global_size)))
          .backward();
      optimizer->step();
      ++step;
      samples += batch.global_size;
      done = hp.max_steps > 0 && step >= hp.max_steps;
      const bool last = done || (epoch == hp.epochs && i + 1 == sampler.steps_per_epoch());
      if (step % hp.log_every == 0 || last) {
        const double loss =
            sum_over_ranks(group, {loss_sum.item<double>()})[0] / static_cast<double>(batch.global_size);
        const double now = train_seconds + seconds_since(t0);
        result.loss = loss;
        if (leader) {
          char line[256];
          std::snprintf(line, sizeof(line),
                        "step=%lld epoch=%lld loss=%.4f lr=%.6g samples_per_s=%.1f",
                        static_cast<long long>(step), static_cast<long long>(epoch), loss, lr,
                        static_cast<double>(samples - samples_at_log) / (now - seconds_at_log));
          out << line << std::endl;
        }
        seconds_at_log = now;
        samples_at_log = samples;
      }
      if (done) break;
    }
    train_seconds += seconds_since(t0);
    if (hp.eval) {
      const EvalResult e = evaluate(*model, test_set, group);
      result.test_acc = e.accuracy;
      if (leader) {
        char line[160];
        std::snprintf(line, sizeof(line), "epoch=%lld test_loss=%.4f test_acc=%.4f",
                      static_cast<long long>(epoch), e.loss, e.accuracy);
        out << line << std::endl;
      }
    }
  }
  result.steps = step;
  result.seconds = train_seconds;
  result.samples_per_s = static_cast<double>(samples) / train_seconds;
  if (leader) {
    char line[200];
    std::snprintf(line, sizeof(line),
                  "final: step=%lld loss=%.4f test_acc=%.4f samples_per_s=%.1f seconds=%.2f",
                  static_cast<long long>(step), result.loss, result.test_acc,
                  result.samples_per_s, result.seconds);
    out << line << std::endl;
    if (!hp.model_dir.empty()) save_model(*model, hp.model_dir);
  }
  return result;
}

}  // namespace heft::train
