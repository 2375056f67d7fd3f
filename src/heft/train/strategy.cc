#include "heft/train/strategy.h"

#include <filesystem>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/parallel/data/distributed_data_parallel.h"
#include "heft/parallel/recompute.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "heft/parallel/sharded/sharded_data_parallel.h"

namespace heft::train {

namespace {

parallel::data::DistributedDataParallelOptions ddp_options(const Hyperparameters& hp) {
  parallel::data::DistributedDataParallelOptions o;
  o.bucket_bytes = static_cast<size_t>(hp.bucket_mb * (1 << 20));
  o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
  o.bf16_compression = hp.bf16_compression;
  return o;
}

int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// The bytes of every tensor in the optimizer's state (momentum, Adam's moments and step).
int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(state.get()))
      n += bytes_of(a->exp_avg()) + bytes_of(a->exp_avg_sq()) + bytes_of(a->max_exp_avg_sq());
    else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(state.get()))
      n += bytes_of(m->momentum_buffer());
  }
  return n;
}

// A share cut into k micro-batches along the batch dimension (the first ones one sample
// larger when k does not divide it).
struct MicroBatch {
  torch::Tensor inputs, targets;
};
std::vector<MicroBatch> split(const Batch& batch, int64_t k) {
  if (k <= 1) return {{batch.inputs, batch.targets}};
  if (batch.inputs.size(0) < k)
    throw InvalidArgument("gradient_accumulation (" + std::to_string(k) +
                          ") is larger than this rank's share of the batch (" +
                          std::to_string(batch.inputs.size(0)) + " samples)");
  const auto xs = batch.inputs.tensor_split(k, 0), ys = batch.targets.tensor_split(k, 0);
  std::vector<MicroBatch> out;
  for (int64_t i = 0; i < k; ++i) out.push_back({xs[i], ys[i]});
  return out;
}

// Every rank a replica; DDP averages gradients over the data group during backward.
class DataParallel : public Strategy {
 public:
  DataParallel(const Hyperparameters& hp, parallel::DeviceMesh& mesh,
               std::shared_ptr<Model> model, const OptimizerConfig& optimizer)
      : hp_(hp),
        group_(mesh.group(parallel::Dim::kData)),
        model_(std::move(model)),
        ddp_(model_, group_, ddp_options(hp)),
        optimizer_(make_optimizer(optimizer, model_->parameters())) {
    if (hp.activation_checkpointing) {
      std::vector<std::vector<torch::Tensor>> params;
      for (const auto& unit : model_->units()) params.push_back(unit->parameters());
      model_->set_unit_runner([params](size_t i, const torch::Tensor& x, const Model::UnitFn& f) {
        return parallel::recompute_in_backward(x, f, params.at(i));
      });
    }
  }

  std::string describe() const override {
    return "data_parallel (" + std::to_string(group_.size()) + " ranks, " +
           std::to_string(ddp_.buckets().size()) + " buckets)";
  }
  Model& model() override { return *model_; }
  parallel::ProcessGroup& data_group() override { return group_; }
  bool reports() const override { return group_.rank() == 0; }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    // Undefined grads: autograd hands its gradient over instead of adding it to zeros.
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    // The global mean times the group size: DDP's average over ranks then gives the gradient
    // of the global mean, whatever this rank's share.
    const double scale = static_cast<double>(group_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const std::vector<MicroBatch> micro = split(batch, hp_.gradient_accumulation);
    for (size_t m = 0; m < micro.size(); ++m) {
      torch::Tensor loss_sum = task.loss_sum(model_->forward(micro[m].inputs), micro[m].targets);
      total += loss_sum.detach().to(torch::kDouble);
      if (m + 1 < micro.size()) {
        auto no_sync = ddp_.no_sync();
        (loss_sum * scale).backward();
      } else {
        (loss_sum * scale).backward();
      }
    }
    if (hp_.grad_clip > 0) torch::nn::utils::clip_grad_norm_(model_->parameters(), hp_.grad_clip);
    optimizer_->step();
    return total;
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    torch::Tensor out = model_->forward(inputs);
    model_->train();
    return out;
  }

  StateBytes state_bytes() override {
    StateBytes b;
    for (const torch::Tensor& p : model_->parameters()) b.params += bytes_of(p);
    for (const auto& bucket : ddp_.buckets()) b.grads += static_cast<int64_t>(bucket.bytes);
    b.optimizer = optimizer_state_bytes(*optimizer_);
    return b;
  }

  std::map<std::string, torch::Tensor> full_parameters() override {
    std::map<std::string, torch::Tensor> out;
    for (const auto& item : model_->named_parameters()) out[item.key()] = item.value().detach().clone();
    return out;
  }

  bool single_writer() const override { return true; }
  std::map<std::string, std::string> state() override {
    return {{"model.pt", parallel::module_to_bytes(*model_)},
            {"optimizer.pt", parallel::optimizer_to_bytes(*optimizer_)}};
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (parallel::sharded::is_sharded_checkpoint(parts)) {
      parallel::sharded::load_named_state(*model_, *optimizer_, hp_.optimizer,
                                          parallel::sharded::read_sharded(parts, where));
      return;
    }
    const std::map<std::string, std::string>& files = parts.at(0);
    for (const char* name : {"model.pt", "optimizer.pt"})
      if (!files.count(name)) throw IoError("checkpoint " + where + " has no " + name);
    parallel::module_from_bytes(*model_, files.at("model.pt"));
    parallel::optimizer_from_bytes(*optimizer_, files.at("optimizer.pt"));
  }

  void save_model(const std::string& dir) override {
    if (group_.rank() != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
    torch::serialize::OutputArchive archive;
    model_->save(archive);
    archive.save_to(dir + "/model.pt");
  }

 private:
  const Hyperparameters& hp_;
  parallel::ProcessGroup& group_;
  std::shared_ptr<Model> model_;
  parallel::data::DistributedDataParallel ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// Parameters, gradients and optimizer state sharded over the mesh's shard group, averaged
// across its replicate group (hybrid) when the shard group is smaller than the data group.
class Sharded : public Strategy {
 public:
  Sharded(const Hyperparameters& hp, parallel::DeviceMesh& mesh, std::shared_ptr<Model> model,
          const OptimizerConfig& optimizer)
      : hp_(hp),
        data_(mesh.group(parallel::Dim::kData)),
        replicate_rank_(mesh.coordinate(parallel::Dim::kReplicate)),
        model_(std::move(model)),
        sdp_(model_, model_->units(), mesh.group(parallel::Dim::kShard),
             &mesh.group(parallel::Dim::kReplicate), sharded_options(hp, optimizer)) {
    std::vector<torch::Tensor> decayed, rest;
    for (size_t f = 0; f < sdp_.shards().size(); ++f)
      (sdp_.flats()[f].group == 0 ? decayed : rest).push_back(sdp_.shards()[f]);
    OptimizerConfig o = optimizer;
    o.decay_matrices_only = false;  // the flats are already split by decay
    optimizer_ = make_optimizer(o, std::move(decayed), std::move(rest));
    model_->set_unit_runner([this](size_t i, const torch::Tensor& x, const Model::UnitFn& f) {
      return sdp_.run_unit(i, x, f);
    });
  }

  std::string describe() const override {
    return "sharded_data_parallel (shard " + std::to_string(sdp_shard_size()) + " x replicate " +
           std::to_string(data_.size() / sdp_shard_size()) + ", ZeRO-" +
           std::to_string(hp_.zero_stage) + (hp_.bf16 ? ", bf16" : "") + ", " +
           std::to_string(sdp_.flats().size()) + " flat parameters)";
  }
  Model& model() override { return *model_; }
  parallel::ProcessGroup& data_group() override { return data_; }
  bool reports() const override { return data_.rank() == 0; }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const std::vector<MicroBatch> micro = split(batch, hp_.gradient_accumulation);
    for (size_t m = 0; m < micro.size(); ++m) {
      sdp_.begin_forward();
      torch::Tensor loss_sum = task.loss_sum(model_->forward(micro[m].inputs), micro[m].targets);
      total += loss_sum.detach().to(torch::kDouble);
      if (m + 1 < micro.size()) {
        auto no_sync = sdp_.no_sync();
        (loss_sum * scale).backward();
      } else {
        (loss_sum * scale).backward();
      }
    }
    if (hp_.grad_clip > 0) {
      const double norm = sdp_.grad_norm();
      const double coefficient = hp_.grad_clip / (norm + 1e-6);
      if (coefficient < 1) sdp_.scale_grads(coefficient);
    }
    optimizer_->step();
    return total;
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    sdp_.begin_forward();
    torch::Tensor out = model_->forward(inputs);
    sdp_.end_forward_without_backward();
    model_->train();
    return out;
  }

  StateBytes state_bytes() override {
    return {sdp_.shard_bytes(), sdp_.grad_bytes(), optimizer_state_bytes(*optimizer_)};
  }

  bool single_writer() const override { return false; }
  std::map<std::string, std::string> state() override {
    return parallel::sharded::save_shards(sdp_, *optimizer_, hp_.optimizer, replicate_rank_);
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (!parallel::sharded::is_sharded_checkpoint(parts))
      throw InvalidArgument("checkpoint " + where +
                            " was written by a data-parallel run; a sharded run reads sharded "
                            "checkpoints only (train on with data parallelism, or start anew)");
    parallel::sharded::load_named_state(sdp_, *optimizer_, hp_.optimizer,
                                        parallel::sharded::read_sharded(parts, where));
  }

  void save_model(const std::string& dir) override {
    const std::map<std::string, torch::Tensor> full = sdp_.full_parameters();
    if (data_.rank() != 0) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
    torch::serialize::OutputArchive archive;
    for (const auto& [name, t] : full) archive.write(name, t);
    archive.save_to(dir + "/model.pt");
  }

  std::map<std::string, torch::Tensor> full_parameters() override {
    return sdp_.full_parameters();
  }

 private:
  static parallel::sharded::ShardedOptions sharded_options(const Hyperparameters& hp,
                                                            const OptimizerConfig& optimizer) {
    parallel::sharded::ShardedOptions o;
    o.reshard_after_forward = hp.zero_stage == 3;
    o.activation_checkpointing = hp.activation_checkpointing;
    if (hp.bf16) o.compute_dtype = torch::kBFloat16;
    const bool matrices_only = optimizer.decay_matrices_only;
    o.group_of = [matrices_only](const std::string&, const torch::Tensor& p) {
      return !matrices_only || p.dim() >= 2 ? 0 : 1;
    };
    return o;
  }
  int sdp_shard_size() const { return const_cast<parallel::sharded::ShardedDataParallel&>(sdp_).shard_group().size(); }

  const Hyperparameters& hp_;
  parallel::ProcessGroup& data_;
  const int replicate_rank_;
  std::shared_ptr<Model> model_;
  parallel::sharded::ShardedDataParallel sdp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

int sharded_degree(const config::Distribution& distribution, const Hyperparameters& hp) {
  if (hp.sharded_data_parallel_degree > 0) return static_cast<int>(hp.sharded_data_parallel_degree);
  return distribution.modelparallel.enabled ? distribution.modelparallel.sharded_data_parallel_degree
                                            : 1;
}

parallel::MeshShape mesh_shape(const config::Distribution& distribution, const Hyperparameters& hp,
                               int world) {
  parallel::MeshShape shape;
  shape.data = distribution.data_parallel_degree(world);
  const int sdp = sharded_degree(distribution, hp);
  if (sdp > 1) {
    if (shape.data % sdp != 0)
      throw InvalidArgument("sharded_data_parallel_degree: expected a divisor of the data-parallel "
                            "degree " + std::to_string(shape.data) + ", found " + std::to_string(sdp));
    shape.shard = sdp;
  }
  shape.pipeline = distribution.modelparallel.partitions;
  shape.tensor = distribution.modelparallel.tensor_parallel_degree;
  shape.placement = distribution.modelparallel.placement_strategy;
  return shape;
}

std::unique_ptr<Strategy> make_strategy(const config::Distribution& distribution,
                                        const Hyperparameters& hp, parallel::DeviceMesh& mesh,
                                        std::shared_ptr<Model> model,
                                        const OptimizerConfig& optimizer) {
  const std::vector<std::string> unsupported = distribution.unsupported_by_trainer();
  if (!unsupported.empty()) throw InvalidArgument(unsupported.front());
  if (sharded_degree(distribution, hp) > 1)
    return std::make_unique<Sharded>(hp, mesh, std::move(model), optimizer);
  if (hp.bf16)
    throw InvalidArgument("bf16: needs sharded_data_parallel_degree > 1 (the sharded strategy "
                          "computes in bfloat16 with float32 master weights in its shards)");
  return std::make_unique<DataParallel>(hp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
