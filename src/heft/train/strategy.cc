#include "heft/train/strategy.h"

#include <filesystem>
#include <sstream>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/mesh_strategy.h"
#include "heft/train/pipeline_strategy.h"

namespace heft::train {

namespace {

using detail::ddp_options;
using detail::MeshStrategy;
using detail::optimizer_state_bytes;

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

// Every rank a replica (of its tensor slice); DDP averages gradients over the data group
// during backward.
class DataParallel : public MeshStrategy {
 public:
  DataParallel(const Hyperparameters& hp, parallel::DeviceMesh& mesh,
               std::shared_ptr<Model> model, const OptimizerConfig& optimizer)
      : MeshStrategy(hp, mesh, std::move(model)),
        ddp_(model_, data_, ddp_options(hp)),
        optimizer_(make_optimizer(optimizer, model_->parameters())) {
    if (hp.activation_checkpointing) recompute_units();
  }

  std::string describe() const override {
    return "data_parallel (" + std::to_string(data_.size()) + " ranks" + tensor_text() + ", " +
           std::to_string(ddp_.buckets().size()) + " buckets" + (hp_.bf16 ? ", bf16" : "") + ")";
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    // Undefined grads: autograd hands its gradient over instead of adding it to zeros.
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    // The global mean times the group size: DDP's average over ranks then gives the gradient
    // of the global mean, whatever this rank's share.
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const std::vector<MicroBatch> micro = split(batch, hp_.gradient_accumulation);
    for (size_t m = 0; m < micro.size(); ++m) {
      torch::Tensor loss_sum = [&] {
        auto timed = profile::phase(profile::Phase::kForward);
        return loss_of(forward_outputs(micro[m].inputs), micro[m].targets, task);
      }();
      total += loss_sum.detach().to(torch::kDouble);
      auto timed = profile::phase(profile::Phase::kBackward);
      if (m + 1 < micro.size()) {
        auto no_sync = ddp_.no_sync();
        (loss_sum * scale).backward();
      } else {
        (loss_sum * scale).backward();
      }
    }
    auto timed = profile::phase(profile::Phase::kOptimizer);
    if (hp_.grad_clip > 0) clip_replica(hp_.grad_clip, nullptr);
    optimizer_->step();
    return total;
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    torch::Tensor out = model_->full_outputs(forward_outputs(inputs));
    model_->train();
    return out;
  }

  StateBytes state_bytes() override { return replica_bytes(ddp_, *optimizer_); }

  std::map<std::string, torch::Tensor> full_parameters() override {
    std::map<std::string, torch::Tensor> local;
    for (const auto& item : model_->named_parameters()) local[item.key()] = item.value().detach().clone();
    return join_tensor_slices(std::move(local));
  }

  // Every rank writes a part; only the first data-parallel rank's holds the replica (of
  // its tensor slice).
  std::map<std::string, std::string> state() override {
    return parallel::sharded::save_replica(*model_, *optimizer_, hp_.optimizer, data_rank_, tensor_);
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (parallel::sharded::is_sharded_checkpoint(parts)) {
      parallel::sharded::load_named_state(*model_, *optimizer_, hp_.optimizer, read_state(parts, where));
      return;
    }
    // A single-writer checkpoint of an earlier heft (model.pt, optimizer.pt).
    if (tensor_.size > 1)
      throw InvalidArgument("checkpoint " + where +
                            " is in the single-writer form of a run without tensor "
                            "parallelism; resume it with tensor_parallel_degree 1");
    const std::map<std::string, std::string>& files = parts.at(0);
    for (const char* name : {"model.pt", "optimizer.pt"})
      if (!files.count(name)) throw IoError("checkpoint " + where + " has no " + name);
    parallel::module_from_bytes(*model_, files.at("model.pt"));
    parallel::optimizer_from_bytes(*optimizer_, files.at("optimizer.pt"));
  }

  // Without tensor parallelism the module's own archive (torch::nn::Module::load reads it);
  // with it, the full parameters by name.
  void save_model(const std::string& dir) override {
    if (tensor_.size > 1) return write_model(full_parameters(), dir);
    if (!reports_) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
    torch::serialize::OutputArchive archive;
    model_->save(archive);
    archive.save_to(dir + "/model.pt");
  }

 private:
  parallel::data::DistributedDataParallel ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

// Parameters, gradients and optimizer state sharded over the mesh's shard group, averaged
// across its replicate group (hybrid) when the shard group is smaller than the data group.
class Sharded : public MeshStrategy {
 public:
  Sharded(const Hyperparameters& hp, parallel::DeviceMesh& mesh, std::shared_ptr<Model> model,
          const OptimizerConfig& optimizer)
      : MeshStrategy(hp, mesh, std::move(model)),
        replicate_rank_(mesh.coordinate(parallel::Dim::kReplicate)),
        sdp_(shard_model(mesh, optimizer)),
        optimizer_(shard_optimizer(*sdp_, optimizer)) {}

  std::string describe() const override {
    const int shard = sdp_->shard_group().size();
    return "sharded_data_parallel (shard " + std::to_string(shard) + " x replicate " +
           std::to_string(data_.size() / shard) + tensor_text() + ", ZeRO-" +
           std::to_string(hp_.zero_stage) + (hp_.bf16 ? ", bf16" : "") + ", " +
           std::to_string(sdp_->flats().size()) + " flat parameters)";
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const std::vector<MicroBatch> micro = split(batch, hp_.gradient_accumulation);
    for (size_t m = 0; m < micro.size(); ++m) {
      torch::Tensor loss_sum = [&] {
        auto timed = profile::phase(profile::Phase::kForward);
        sdp_->begin_forward();
        return loss_of(model_->forward(micro[m].inputs), micro[m].targets, task);
      }();
      total += loss_sum.detach().to(torch::kDouble);
      auto timed = profile::phase(profile::Phase::kBackward);
      if (m + 1 < micro.size()) {
        auto no_sync = sdp_->no_sync();
        (loss_sum * scale).backward();
      } else {
        (loss_sum * scale).backward();
      }
    }
    auto timed = profile::phase(profile::Phase::kOptimizer);
    if (hp_.grad_clip > 0) clip_shards(*sdp_, hp_.grad_clip, nullptr);
    optimizer_->step();
    return total;
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    sdp_->begin_forward();
    torch::Tensor out = model_->forward(inputs);
    sdp_->end_forward_without_backward();
    model_->train();
    return model_->full_outputs(out);
  }

  StateBytes state_bytes() override {
    return {sdp_->shard_bytes(), sdp_->grad_bytes(), optimizer_state_bytes(*optimizer_)};
  }

  std::map<std::string, torch::Tensor> full_parameters() override {
    return join_tensor_slices(sdp_->full_parameters());
  }

  std::map<std::string, std::string> state() override {
    return parallel::sharded::save_shards(*sdp_, *optimizer_, hp_.optimizer, replicate_rank_, tensor_);
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (!parallel::sharded::is_sharded_checkpoint(parts))
      throw InvalidArgument("checkpoint " + where +
                            " is in the single-writer form of an earlier heft; a sharded run "
                            "reads the part-per-rank form only (resume it with data "
                            "parallelism, or start anew)");
    parallel::sharded::load_named_state(*sdp_, *optimizer_, hp_.optimizer, read_state(parts, where));
  }

  void save_model(const std::string& dir) override { write_model(full_parameters(), dir); }

 private:
  const int replicate_rank_;
  std::unique_ptr<parallel::sharded::ShardedDataParallel> sdp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

int sharded_degree(const config::Distribution& distribution, const Hyperparameters& hp) {
  if (hp.sharded_data_parallel_degree > 0) return static_cast<int>(hp.sharded_data_parallel_degree);
  return distribution.modelparallel.enabled ? distribution.modelparallel.sharded_data_parallel_degree
                                            : 1;
}

PipelineSettings pipeline_settings(const config::Distribution& distribution,
                                   const Hyperparameters& hp) {
  const config::ModelParallel& mp = distribution.modelparallel;
  PipelineSettings s;
  s.partitions = hp.partitions > 0 ? static_cast<int>(hp.partitions) : (mp.enabled ? mp.partitions : 1);
  s.microbatches = hp.microbatches > 0 ? static_cast<int>(hp.microbatches) : (mp.enabled ? mp.microbatches : 1);
  s.kind = !hp.pipeline.empty() ? hp.pipeline : (mp.enabled ? mp.pipeline : "interleaved");
  s.active = mp.enabled && mp.active_microbatches > 0 ? mp.active_microbatches : s.partitions + 2;
  s.memory_weight = mp.enabled ? mp.memory_weight : 0.2;
  s.auto_partition = mp.enabled ? mp.auto_partition : true;
  s.virtual_stages = hp.virtual_stages > 0 ? static_cast<int>(hp.virtual_stages)
                                           : (mp.enabled ? mp.virtual_stages : 1);
  s.default_partition = mp.enabled ? mp.default_partition : 0;
  std::stringstream list(hp.partition_boundaries);
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) s.boundaries.push_back(std::stoi(item));
  if (s.boundaries.empty() && mp.enabled) s.boundaries = mp.partition_boundaries;
  return s;
}

int tensor_degree(const config::Distribution& distribution, const Hyperparameters& hp) {
  if (hp.tensor_parallel_degree > 0) return static_cast<int>(hp.tensor_parallel_degree);
  return distribution.modelparallel.enabled ? distribution.modelparallel.tensor_parallel_degree : 1;
}

parallel::MeshShape mesh_shape(const config::Distribution& distribution, const Hyperparameters& hp,
                               int world) {
  parallel::MeshShape shape;
  shape.tensor = tensor_degree(distribution, hp);
  const int pipeline = pipeline_settings(distribution, hp).partitions;
  if (shape.tensor < 1 || world % (shape.tensor * pipeline) != 0)
    throw InvalidArgument("tensor_parallel_degree: " + std::to_string(shape.tensor) + " x " +
                          "partitions " + std::to_string(pipeline) + " must divide the " +
                          std::to_string(world) + " workers");
  shape.data = world / (shape.tensor * pipeline);
  const int sdp = sharded_degree(distribution, hp);
  if (sdp > 1) {
    if (shape.data % sdp != 0)
      throw InvalidArgument("sharded_data_parallel_degree: expected a divisor of the data-parallel "
                            "degree " + std::to_string(shape.data) + ", found " + std::to_string(sdp));
    shape.shard = sdp;
  }
  shape.pipeline = pipeline;
  if (distribution.modelparallel.enabled) shape.placement = distribution.modelparallel.placement_strategy;
  return shape;
}

std::unique_ptr<Strategy> make_strategy(const config::Distribution& distribution,
                                        const Hyperparameters& hp, parallel::DeviceMesh& mesh,
                                        std::shared_ptr<Model> model,
                                        const OptimizerConfig& optimizer) {
  const std::vector<std::string> unsupported = distribution.unsupported_by_trainer();
  if (!unsupported.empty()) throw InvalidArgument(unsupported.front());
  const PipelineSettings pipe = pipeline_settings(distribution, hp);
  if (pipe.partitions > 1) {
    PipelineSettings settings = pipe;
    settings.sharded = sharded_degree(distribution, hp) > 1;
    return make_pipeline_strategy(hp, settings, mesh, std::move(model), optimizer);
  }
  if (sharded_degree(distribution, hp) > 1)
    return std::make_unique<Sharded>(hp, mesh, std::move(model), optimizer);
  return std::make_unique<DataParallel>(hp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
