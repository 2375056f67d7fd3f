#include "heft/train/strategy.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <sstream>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/parallel/data/distributed_data_parallel.h"
#include "heft/parallel/pipeline/partition.h"
#include "heft/parallel/pipeline/pipeline.h"
#include "heft/parallel/pipeline/schedule.h"
#include "heft/parallel/recompute.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "heft/parallel/sharded/sharded_data_parallel.h"
#include "heft/profile/step_profiler.h"

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

// What both strategies share: the mesh's groups, who reports, the tensor-parallel layout of
// the model, its loss and outputs, and gathering tensor slices into full parameters.
class MeshStrategy : public Strategy {
 protected:
  MeshStrategy(const Hyperparameters& hp, parallel::DeviceMesh& mesh, std::shared_ptr<Model> model)
      : hp_(hp),
        data_(mesh.group(parallel::Dim::kData)),
        tensor_group_(mesh.group(parallel::Dim::kTensor)),
        data_rank_(mesh.coordinate(parallel::Dim::kData)),
        reports_(mesh.coordinate(parallel::Dim::kData) == 0 &&
                 mesh.coordinate(parallel::Dim::kTensor) == 0 &&
                 mesh.coordinate(parallel::Dim::kPipeline) == mesh.size(parallel::Dim::kPipeline) - 1),
        model_(std::move(model)) {
    tensor_.rank = tensor_group_.rank();
    tensor_.size = tensor_group_.size();
    tensor_.splits = model_->tensor_splits();
  }

 public:
  Model& model() override { return *model_; }
  parallel::ProcessGroup& data_group() override { return data_; }
  bool reports() const override { return reports_; }
  bool single_writer() const override { return false; }
  double loss_total(const torch::Tensor& loss_sum) override {
    return data_.sum({loss_sum.item<double>()})[0];
  }

 protected:
  // The loss of this rank's outputs: the model's own when its outputs are split (tensor
  // parallel), else the task's.
  torch::Tensor loss_of(const torch::Tensor& outputs, const torch::Tensor& targets,
                        const Task& task) {
    torch::Tensor l = model_->loss_sum(outputs, targets);
    return l.defined() ? l : task.loss_sum(outputs, targets);
  }
  // Tensor slices by name -> full parameters (a collective over the tensor group).
  std::map<std::string, torch::Tensor> join_tensor_slices(std::map<std::string, torch::Tensor> local) {
    if (tensor_.size == 1) return local;
    for (auto& [name, t] : local) {
      const parallel::tensor::Split s = tensor_.split_of(name);
      if (s.dim < 0) continue;
      const torch::Tensor all = tensor_group_.allgather(t.contiguous());
      t = parallel::tensor::join_slices(all.unbind(0), s);
    }
    return local;
  }
  // A checkpoint's parts -> what this rank holds, by name (any layout that wrote them).
  parallel::sharded::NamedState read_state(const std::vector<std::map<std::string, std::string>>& parts,
                                           const std::string& where) {
    return parallel::sharded::local_view(parallel::sharded::read_sharded(parts, where), tensor_);
  }
  void write_model(const std::map<std::string, torch::Tensor>& full, const std::string& dir) {
    if (!reports_) return;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw IoError("cannot create model directory " + dir + ": " + ec.message());
    torch::serialize::OutputArchive archive;
    for (const auto& [name, t] : full) archive.write(name, t);
    archive.save_to(dir + "/model.pt");
  }
  std::string tensor_text() const {
    return tensor_.size > 1 ? " x tensor " + std::to_string(tensor_.size) : "";
  }
  // Activation checkpointing of the model's units (a dropped unit: nothing to recompute).
  void recompute_units() {
    std::vector<std::vector<torch::Tensor>> params;
    for (const auto& unit : model_->units())
      params.push_back(unit ? unit->parameters() : std::vector<torch::Tensor>{});
    model_->set_unit_runner([params](size_t i, const torch::Tensor& x, const Model::UnitFn& f) {
      return parallel::recompute_in_backward(x, f, params.at(i));
    });
  }
  // A replicated module's state: its parameters, DDP's buckets, the optimizer's state.
  StateBytes replica_bytes(const parallel::data::DistributedDataParallel& ddp,
                           torch::optim::Optimizer& optimizer) {
    StateBytes b;
    for (const torch::Tensor& p : model_->parameters()) b.params += bytes_of(p);
    for (const auto& bucket : ddp.buckets()) b.grads += static_cast<int64_t>(bucket.bytes);
    b.optimizer = optimizer_state_bytes(optimizer);
    return b;
  }
  // torch's clip_grad_norm_ over the full model for a replicated module: the norm of
  // replicated parameters counted once, of split ones summed over the tensor group, and
  // with a pipeline every stage's summed over `stages`.
  void clip_replica(double max_norm, parallel::ProcessGroup* stages) {
    double split_sq = 0, replicated_sq = 0;
    for (const auto& item : model_->named_parameters()) {
      const torch::Tensor& g = item.value().grad();
      if (!g.defined()) continue;
      const double sq = g.to(torch::kDouble).square().sum().item<double>();
      (tensor_.split_of(item.key()).dim >= 0 ? split_sq : replicated_sq) += sq;
    }
    if (tensor_.size > 1) split_sq = tensor_group_.sum({split_sq})[0];
    double total = split_sq + replicated_sq;
    if (stages && stages->size() > 1) total = stages->sum({total})[0];
    const double coefficient = max_norm / (std::sqrt(total) + 1e-6);
    if (coefficient >= 1) return;
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model_->parameters())
      if (p.grad().defined()) p.mutable_grad().mul_(coefficient);
  }

  // The sharded form of this model over the mesh's shard and replicate groups; its flats'
  // groups are 2·(split over the tensor group) + (not decayed), so a flat holds either split
  // or replicated parameters (clip_shards counts each once) and one optimizer group.
  std::unique_ptr<parallel::sharded::ShardedDataParallel> shard_model(
      parallel::DeviceMesh& mesh, const OptimizerConfig& optimizer) {
    parallel::sharded::ShardedOptions o;
    o.reshard_after_forward = hp_.zero_stage == 3;
    o.activation_checkpointing = hp_.activation_checkpointing;
    if (hp_.bf16) o.compute_dtype = torch::kBFloat16;
    const bool matrices_only = optimizer.decay_matrices_only;
    const parallel::sharded::TensorLayout tensor = tensor_;
    o.group_of = [matrices_only, tensor](const std::string& name, const torch::Tensor& p) {
      const int decayed = !matrices_only || p.dim() >= 2 ? 0 : 1;
      return (tensor.size > 1 && tensor.split_of(name).dim >= 0 ? 2 : 0) + decayed;
    };
    auto sdp = std::make_unique<parallel::sharded::ShardedDataParallel>(
        model_, model_->units(), mesh.group(parallel::Dim::kShard),
        &mesh.group(parallel::Dim::kReplicate), o);
    parallel::sharded::ShardedDataParallel* raw = sdp.get();
    model_->set_unit_runner([raw](size_t i, const torch::Tensor& x, const Model::UnitFn& f) {
      return raw->run_unit(i, x, f);
    });
    return sdp;
  }
  // The optimizer over a sharded model's shards, one group per weight-decay class.
  static std::unique_ptr<torch::optim::Optimizer> shard_optimizer(
      parallel::sharded::ShardedDataParallel& sdp, OptimizerConfig optimizer) {
    std::vector<torch::Tensor> decayed, rest;
    for (size_t f = 0; f < sdp.shards().size(); ++f)
      (sdp.flats()[f].group % 2 == 0 ? decayed : rest).push_back(sdp.shards()[f]);
    optimizer.decay_matrices_only = false;  // the flats are already split by decay
    return make_optimizer(optimizer, std::move(decayed), std::move(rest));
  }
  // The global norm of a sharded model's gradients: shards summed over the shard group
  // (replicas hold the same), split flats also over the tensor group, and with a pipeline
  // every stage's over `stages`.
  void clip_shards(parallel::sharded::ShardedDataParallel& sdp, double max_norm,
                   parallel::ProcessGroup* stages) {
    double split_sq = 0, replicated_sq = 0;
    for (size_t f = 0; f < sdp.shards().size(); ++f) {
      const torch::Tensor& g = sdp.shards()[f].grad();
      if (!g.defined()) continue;
      const double sq = g.to(torch::kDouble).square().sum().item<double>();
      (sdp.flats()[f].group >= 2 ? split_sq : replicated_sq) += sq;
    }
    if (sdp.shard_group().size() > 1) {
      const std::vector<double> sums = sdp.shard_group().sum({split_sq, replicated_sq});
      split_sq = sums[0];
      replicated_sq = sums[1];
    }
    if (tensor_.size > 1) split_sq = tensor_group_.sum({split_sq})[0];
    double total = split_sq + replicated_sq;
    if (stages && stages->size() > 1) total = stages->sum({total})[0];
    const double coefficient = max_norm / (std::sqrt(total) + 1e-6);
    if (coefficient < 1) sdp.scale_grads(coefficient);
  }

  const Hyperparameters& hp_;
  parallel::ProcessGroup& data_;
  parallel::ProcessGroup& tensor_group_;
  const int data_rank_;
  const bool reports_;
  std::shared_ptr<Model> model_;
  parallel::sharded::TensorLayout tensor_;
};

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
           std::to_string(ddp_.buckets().size()) + " buckets)";
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
        return loss_of(model_->forward(micro[m].inputs), micro[m].targets, task);
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
    torch::Tensor out = model_->full_outputs(model_->forward(inputs));
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

// The model cut into stages over the mesh's pipeline group; each stage replicated over the
// data group with DDP (and split over the tensor group when the model is). A step runs the
// schedule's action list for this stage (parallel/pipeline): micro-batches forward and
// backward, activations and their gradients exchanged with the neighbouring stages; the
// loss lives on the last stage, whose first data and tensor rank reports.
class Pipelined : public MeshStrategy {
 public:
  Pipelined(const Hyperparameters& hp, const PipelineSettings& settings, parallel::DeviceMesh& mesh,
            std::shared_ptr<Model> model, const OptimizerConfig& optimizer)
      : MeshStrategy(hp, mesh, std::move(model)),
        settings_(settings),
        pipe_(mesh.group(parallel::Dim::kPipeline)),
        schedule_(parallel::pipeline::make_schedule(settings.kind, pipe_.size(),
                                                    settings.microbatches, settings.active,
                                                    settings.virtual_stages)) {
    const std::vector<std::string> names = model_->layer_names();
    if (names.empty())
      throw InvalidArgument("partitions: model " + hp.model + " cannot be cut into pipeline stages (gpt can)");
    plan_ = make_plan(mesh);
    // This rank holds virtual stages s, s + p, ...: one chunk of consecutive layers each.
    std::vector<bool> keep(names.size(), false);
    for (int c = 0; c < settings.virtual_stages; ++c) {
      const int vs = c * pipe_.size() + pipe_.rank();
      const int first = plan_.first[static_cast<size_t>(vs)];
      const int last = plan_.last_layer(vs, static_cast<int>(names.size()));
      chunks_.push_back({first, last});
      for (int l = first; l <= last; ++l) keep[static_cast<size_t>(l)] = true;
    }
    stage_first_ = chunks_.front().first;
    stage_last_ = chunks_.back().second;
    model_->keep_layers(keep);
    const parallel::pipeline::Simulation sim = parallel::pipeline::simulate(schedule_);
    if (!sim.ok) throw InvalidArgument("pipeline schedule: " + sim.error);
    if (settings.sharded) {
      // Each stage's layers sharded over the stage's data ranks (its units: the blocks it
      // holds; the rest of its layers the root).
      sdp_ = shard_model(mesh, optimizer);
      optimizer_ = shard_optimizer(*sdp_, optimizer);
      replicate_rank_ = mesh.coordinate(parallel::Dim::kReplicate);
      return;
    }
    ddp_ = std::make_unique<parallel::data::DistributedDataParallel>(
        std::static_pointer_cast<torch::nn::Module>(model_), data_, ddp_options(hp));
    optimizer_ = make_optimizer(optimizer, model_->parameters());
    if (hp.activation_checkpointing) recompute_units();
  }

  std::string describe() const override {
    const std::vector<std::string> names = model_->layer_names();
    std::string mine;
    for (const auto& [first, last] : chunks_)
      mine += (mine.empty() ? "" : ", ") + names[static_cast<size_t>(first)] + " .. " +
              names[static_cast<size_t>(last)];
    return "pipeline (" + std::to_string(pipe_.size()) + " stages" +
           (settings_.virtual_stages > 1 ? " x " + std::to_string(settings_.virtual_stages) + " virtual" : "") +
           ", " + settings_.kind + ", " + std::to_string(settings_.microbatches) +
           " micro-batches; this stage: layers " + mine + ") x data_parallel " +
           std::to_string(data_.size()) + tensor_text() + "\n" +
           parallel::pipeline::describe(plan_, costs_) + profile_text();
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    const int m = settings_.microbatches;
    if (batch.inputs.size(0) % m != 0)
      throw InvalidArgument("microbatches: " + std::to_string(m) +
                            " does not divide this data-parallel rank's share of the batch (" +
                            std::to_string(batch.inputs.size(0)) + " samples)");
    const auto xs = batch.inputs.chunk(m, 0), ys = batch.targets.chunk(m, 0);
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const int V = settings_.virtual_stages * pipe_.size();
    parallel::pipeline::StageFunctions f;
    f.forward = [&](int chunk, int j, const torch::Tensor& input) {
      const int vs = chunk * pipe_.size() + pipe_.rank();
      const auto [first, last] = chunks_[static_cast<size_t>(chunk)];
      if (sdp_) sdp_->begin_forward();
      // Activations cross stages in float32 (bf16: cast to the compute dtype on arrival).
      torch::Tensor out = model_->forward_range(first, last, vs == 0 ? xs[j] : to_compute(input));
      if (vs != V - 1) return out.to(torch::kFloat);
      torch::Tensor loss = loss_of(out, ys[j], task);
      total += loss.detach().to(torch::kDouble);
      return loss * scale;
    };
    // DDP reduces during the stage's last backward pass; with virtual stages no pass covers
    // every chunk, so all run without it and the gradients are averaged after the step. The
    // sharded wrapper reduces, at the end of the last pass, the gradients the earlier passes
    // left in its units too, so it syncs in the last pass either way.
    const bool chunks = settings_.virtual_stages > 1;
    f.around_backward = [&](int, bool last_backward, const std::function<void()>& run) {
      if (last_backward && (!chunks || sdp_)) return run();
      if (sdp_) {
        auto no_sync = sdp_->no_sync();
        return run();
      }
      auto no_sync = ddp_->no_sync();
      run();
    };
    f.activation_shape = [&](int j) { return activation_shape(xs[j].size(0), xs[j]); };
    parallel::pipeline::run_stage(schedule_, pipe_, f, &counters_);
    {
      auto timed = profile::phase(profile::Phase::kOptimizer);
      if (chunks && ddp_ && data_.size() > 1) average_gradients();
      if (hp_.grad_clip > 0) {
        if (sdp_) clip_shards(*sdp_, hp_.grad_clip, &pipe_);
        else clip_replica(hp_.grad_clip, &pipe_);
      }
      optimizer_->step();
    }
    measure_stage();
    return total;
  }

  double loss_total(const torch::Tensor& loss_sum) override {
    torch::Tensor t = torch::tensor({MeshStrategy::loss_total(loss_sum)}, torch::kDouble);
    pipe_.broadcast(t, pipe_.size() - 1);
    return t.item<double>();
  }

  // The whole model's outputs on every stage: the activations go through the stages, the
  // last one's outputs are broadcast over the pipeline group.
  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    const int s = pipe_.rank(), p = pipe_.size(), V = settings_.virtual_stages * p;
    torch::Tensor out;
    for (int vs = 0; vs < V; ++vs) {  // each virtual stage's owner in turn
      if (vs % p != s) continue;
      torch::Tensor x = inputs;
      if (vs > 0) {
        x = torch::empty(activation_shape(inputs.size(0), inputs), torch::kFloat);
        pipe_.exchange({parallel::TensorP2P::from(x, (vs - 1) % p, (1u << 30) + static_cast<uint32_t>(vs))});
      }
      const auto [first, last] = chunks_[static_cast<size_t>(vs / p)];
      if (sdp_) sdp_->begin_forward();
      out = model_->forward_range(first, last, vs > 0 ? to_compute(x) : x);
      if (sdp_) sdp_->end_forward_without_backward();
      if (vs < V - 1)
        pipe_.exchange({parallel::TensorP2P::to(out.to(torch::kFloat).contiguous(), (vs + 1) % p,
                                                (1u << 30) + static_cast<uint32_t>(vs + 1))});
    }
    model_->train();
    torch::Tensor shape = torch::zeros({4}, torch::kLong);
    if (s == p - 1) {
      out = model_->full_outputs(out).contiguous();
      for (int64_t d = 0; d < std::min<int64_t>(4, out.dim()); ++d) shape[d] = out.size(d);
    }
    pipe_.broadcast(shape, p - 1);
    std::vector<int64_t> sizes;
    for (int64_t d = 0; d < 4 && shape[d].item<int64_t>() > 0; ++d) sizes.push_back(shape[d].item<int64_t>());
    if (s != p - 1) out = torch::empty(sizes, torch::kFloat);
    out = out.to(torch::kFloat).contiguous();
    pipe_.broadcast(out, p - 1);
    return out;
  }

  StateBytes state_bytes() override {
    if (sdp_) return {sdp_->shard_bytes(), sdp_->grad_bytes(), optimizer_state_bytes(*optimizer_)};
    return replica_bytes(*ddp_, *optimizer_);
  }

  // Every stage's parameters, on every rank (a collective over the pipeline group).
  std::map<std::string, torch::Tensor> full_parameters() override {
    std::map<std::string, torch::Tensor> local;
    if (sdp_) {
      local = sdp_->full_parameters();
    } else {
      for (const auto& item : model_->named_parameters()) local[item.key()] = item.value().detach().clone();
    }
    local = join_tensor_slices(std::move(local));
    std::map<std::string, torch::Tensor> all;
    for (int s = 0; s < pipe_.size(); ++s) {
      std::string bytes;
      if (s == pipe_.rank()) {
        torch::serialize::OutputArchive archive;
        for (const auto& [name, t] : local) archive.write(name, t);
        std::ostringstream os;
        archive.save_to(os);
        bytes = os.str();
      }
      torch::Tensor size = torch::tensor({static_cast<int64_t>(bytes.size())}, torch::kLong);
      pipe_.broadcast(size, s);
      // Moved as int32 words (the communicator has no byte type).
      const int64_t n = size.item<int64_t>();
      torch::Tensor data = torch::zeros({(n + 3) / 4}, torch::kInt);
      if (s == pipe_.rank()) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
      pipe_.broadcast(data, s);
      torch::serialize::InputArchive in;
      in.load_from(static_cast<const char*>(data.data_ptr()), static_cast<size_t>(n));
      for (const std::string& key : in.keys()) {
        torch::Tensor t;
        in.read(key, t);
        all[key] = t;
      }
    }
    return all;
  }

  std::map<std::string, std::string> state() override {
    if (sdp_)
      return parallel::sharded::save_shards(*sdp_, *optimizer_, hp_.optimizer, replicate_rank_,
                                            tensor_, pipe_.rank());
    return parallel::sharded::save_replica(*model_, *optimizer_, hp_.optimizer, data_rank_, tensor_,
                                           pipe_.rank());
  }
  void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                  const std::string& where) override {
    if (!parallel::sharded::is_sharded_checkpoint(parts))
      throw InvalidArgument("checkpoint " + where +
                            " is in the single-writer form of an earlier heft; a pipelined run "
                            "reads the part-per-rank form only");
    if (sdp_)
      parallel::sharded::load_named_state(*sdp_, *optimizer_, hp_.optimizer,
                                          read_state(parts, where), /*subset=*/true);
    else
      parallel::sharded::load_named_state(*model_, *optimizer_, hp_.optimizer,
                                          read_state(parts, where), /*subset=*/true);
  }

  void save_model(const std::string& dir) override { write_model(full_parameters(), dir); }

  std::string summary() const override {
    char line[256];
    const double idle = counters_.step_seconds > 0
                            ? 1.0 - counters_.busy_seconds / counters_.step_seconds : 0;
    std::snprintf(line, sizeof(line),
                  "pipeline: stage=%d busy_seconds=%.3f step_seconds=%.3f idle_fraction=%.3f "
                  "theory=%.3f max_in_flight=%d exchanges=%lld",
                  pipe_.rank(), counters_.busy_seconds, counters_.step_seconds, idle,
                  parallel::pipeline::theoretical_bubble(pipe_.size(), settings_.microbatches, settings_.virtual_stages),
                  counters_.max_in_flight, static_cast<long long>(counters_.exchanges));
    if (!reports_ || measured_s_.empty()) return line;
    const std::string what = measure_steps_ == 1 ? "step 1" : "steps 2-" + std::to_string(measure_steps_);
    return line + std::string("\n") +
           parallel::pipeline::describe_measured(plan_, costs_, pipe_.size(), measured_s_,
                                                 "median of " + what + " on data rank 0");
  }

 private:
  torch::Tensor to_compute(const torch::Tensor& x) const {
    return hp_.bf16 ? x.to(torch::kBFloat16) : x;
  }

  // The activation a stage receives for a micro-batch of b samples with inputs like x:
  // (b, T, n_embd) for the GPT.
  std::vector<int64_t> activation_shape(int64_t b, const torch::Tensor& x) const {
    return {b, x.size(1), hp_.n_embd};
  }

  // The plan every rank takes: a given split, an even one, or the automatic one, cut from
  // the profile of the ranks at pipeline 0 and data 0 (all tensor ranks, whose layers run
  // tensor collectives); every other rank waits, so the profile runs on a quiet machine, and
  // takes tensor rank 0's costs (broadcast along each mesh dimension in turn). The same
  // costs give every rank the same split (auto_partition is deterministic).
  parallel::pipeline::Plan make_plan(parallel::DeviceMesh& mesh) {
    const std::vector<std::string> names = model_->layer_names();
    const int n = static_cast<int>(names.size());
    const int V = settings_.virtual_stages * pipe_.size();  // virtual stages in all
    if (V > n)
      throw InvalidArgument(settings_.virtual_stages > 1
                                ? "partitions x virtual_stages: expected at most the model's " +
                                      std::to_string(n) + " layers, found " + std::to_string(V)
                                : "partitions: expected 1 to the model's " + std::to_string(n) +
                                      " layers, found " + std::to_string(V));
    std::vector<int> first(static_cast<size_t>(V));
    costs_.assign(names.size(), {});
    for (size_t i = 0; i < names.size(); ++i) costs_[i].name = names[i];
    if (!settings_.boundaries.empty()) {
      if (static_cast<int>(settings_.boundaries.size()) != V - 1)
        throw InvalidArgument("partition_boundaries: expected " + std::to_string(V - 1) +
                              " layer indices (one per stage after the first), found " +
                              std::to_string(settings_.boundaries.size()));
      for (int s = 1; s < V; ++s) first[static_cast<size_t>(s)] = settings_.boundaries[static_cast<size_t>(s - 1)];
    } else if (settings_.auto_partition) {
      if (mesh.coordinate(parallel::Dim::kPipeline) == 0 && mesh.coordinate(parallel::Dim::kData) == 0)
        costs_ = profile_pipeline_layers(*model_, profile_microbatch(), profile_options_);
      share_costs(mesh);
      first = parallel::pipeline::auto_partition(costs_, V, settings_.memory_weight, kPartitionTolerance).first;
    } else {
      // Evenly by count; the layers the division leaves go to stage default_partition (its
      // first chunk).
      const int extra_at = std::min(settings_.default_partition, V - 1);
      for (int s = 1; s < V; ++s)
        first[static_cast<size_t>(s)] = first[static_cast<size_t>(s - 1)] + n / V +
                                        (s - 1 == extra_at ? n % V : 0);
      for (auto& c : costs_) c = {c.name, 1, 2, 0, 0};
    }
    return parallel::pipeline::manual_partition(costs_, {first.begin() + 1, first.end()},
                                                settings_.memory_weight);
  }

  // How the automatic split's costs were found (empty for a given or even split).
  std::string profile_text() const {
    if (!settings_.boundaries.empty() || !settings_.auto_partition) return "";
    char line[320];
    std::snprintf(line, sizeof(line),
                  "profile: by the ranks at pipeline 0 and data 0 alone, on micro-batches of %lld "
                  "samples, each layer's median of %d rounds after %d warm-up rounds; splits within "
                  "%.0f%% of the best count as equal (then the fewest activation bytes across the "
                  "cuts, the most even layer counts)",
                  static_cast<long long>(profile_microbatch()), profile_options_.repeats,
                  profile_options_.warmup, kPartitionTolerance * 100);
    return line;
  }

  // The micro-batch the stages will run: this data rank's share over the micro-batches.
  int64_t profile_microbatch() const {
    return std::max<int64_t>(1, hp_.batch_size / std::max(1, data_.size()) / settings_.microbatches);
  }

  // costs_ of the rank at coordinate 0 of every dimension, on every rank: 4 numbers a layer.
  void share_costs(parallel::DeviceMesh& mesh) {
    torch::Tensor t = torch::zeros({static_cast<int64_t>(costs_.size()), 4}, torch::kDouble);
    for (size_t i = 0; i < costs_.size(); ++i) {
      const int64_t r = static_cast<int64_t>(i);
      t[r][0] = costs_[i].forward_s;
      t[r][1] = costs_[i].backward_s;
      t[r][2] = static_cast<double>(costs_[i].param_bytes);
      t[r][3] = static_cast<double>(costs_[i].activation_bytes);
    }
    for (parallel::Dim d : {parallel::Dim::kTensor, parallel::Dim::kData, parallel::Dim::kPipeline})
      if (mesh.size(d) > 1) mesh.group(d).broadcast(t, 0);
    for (size_t i = 0; i < costs_.size(); ++i) {
      const torch::Tensor row = t[static_cast<int64_t>(i)];
      costs_[i].forward_s = row[0].item<double>();
      costs_[i].backward_s = row[1].item<double>();
      costs_[i].param_bytes = static_cast<int64_t>(row[2].item<double>());
      costs_[i].activation_bytes = static_cast<int64_t>(row[3].item<double>());
    }
  }

  // After each step: this stage's compute time per micro-batch (steps 2.. of the first
  // measure_steps_, or step 1 when the run has one), and at the last of them every stage's
  // median, gathered over the pipeline group (a collective: every stage runs the same steps).
  void measure_stage() {
    ++steps_;
    if (steps_ > measure_steps_) return;
    if (steps_ > 1 || measure_steps_ == 1)
      stage_samples_.insert(stage_samples_.end(), counters_.microbatch_seconds.begin(),
                            counters_.microbatch_seconds.end());
    if (steps_ < measure_steps_) return;
    std::vector<double> mine(static_cast<size_t>(pipe_.size()), 0.0);
    mine[static_cast<size_t>(pipe_.rank())] = parallel::pipeline::median(stage_samples_);
    measured_s_ = pipe_.sum(mine);
  }

  // Every gradient averaged over the data group in one flat allreduce.
  void average_gradients() {
    std::vector<torch::Tensor> grads;
    for (torch::Tensor& p : model_->parameters()) {
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      grads.push_back(p.grad().reshape({-1}));
    }
    torch::Tensor flat = torch::cat(grads);
    data_.allreduce(flat, comm::ReduceOp::avg);
    int64_t offset = 0;
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : model_->parameters()) {
      p.mutable_grad().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
  }

  const PipelineSettings settings_;
  parallel::ProcessGroup& pipe_;
  parallel::pipeline::Schedule schedule_;
  parallel::pipeline::Plan plan_;
  std::vector<parallel::pipeline::LayerCost> costs_;
  int stage_first_ = 0, stage_last_ = 0;
  std::vector<std::pair<int, int>> chunks_;  // this rank's layer ranges, by chunk
  std::unique_ptr<parallel::data::DistributedDataParallel> ddp_;  // or
  std::unique_ptr<parallel::sharded::ShardedDataParallel> sdp_;
  int replicate_rank_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  parallel::pipeline::PipelineCounters counters_;
  const parallel::pipeline::ProfileOptions profile_options_;
  // Steps whose stage times are measured; the last one gathers them.
  const int64_t measure_steps_ = hp_.max_steps > 0 ? std::min<int64_t>(hp_.max_steps, 10) : 10;
  int64_t steps_ = 0;
  std::vector<double> stage_samples_;  // this stage's seconds per micro-batch
  std::vector<double> measured_s_;     // every stage's median, once gathered
};

}  // namespace

std::vector<parallel::pipeline::LayerCost> profile_pipeline_layers(
    Model& model, int64_t microbatch, const parallel::pipeline::ProfileOptions& options) {
  const std::vector<std::string> names = model.layer_names();
  std::vector<parallel::pipeline::LayerCost> out(names.size());
  for (size_t i = 0; i < names.size(); ++i) out[i].name = names[i];
  // The sample comes from the global generator: its state is put back, so that profiling
  // on some ranks only leaves every rank's random stream as it was.
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  const torch::Tensor input = model.sample_input(microbatch);
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(state);
  }
  if (!input.defined()) return out;
  // Each layer's input: the previous layer's output (layer i reads inputs[i]).
  std::vector<torch::Tensor> inputs{input};
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i + 1 < names.size(); ++i)
      inputs.push_back(model.forward_range(static_cast<int>(i), static_cast<int>(i), inputs.back()));
  }
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  std::vector<int64_t> activation_bytes(names.size(), 0);
  parallel::pipeline::profile_layers(out, options, [&](int i, double* forward_s, double* backward_s) {
    const torch::Tensor& x = inputs[static_cast<size_t>(i)];
    const torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_(true) : x;
    const Clock::time_point t0 = Clock::now();
    const torch::Tensor y = model.forward_range(i, i, in);
    const Clock::time_point t1 = Clock::now();
    y.backward(torch::ones_like(y));
    const Clock::time_point t2 = Clock::now();
    *forward_s = seconds(t0, t1);
    *backward_s = seconds(t1, t2);
    activation_bytes[static_cast<size_t>(i)] = bytes_of(y);
    for (const torch::Tensor& p : model.layer_parameters(i)) p.mutable_grad().reset();
  });
  for (size_t i = 0; i < names.size(); ++i) {
    out[i].activation_bytes = activation_bytes[i];
    for (const torch::Tensor& p : model.layer_parameters(static_cast<int>(i))) out[i].param_bytes += bytes_of(p);
  }
  return out;
}

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
    if (hp.bf16 && !settings.sharded)
      throw InvalidArgument("bf16: needs sharded_data_parallel_degree > 1");
    return std::make_unique<Pipelined>(hp, settings, mesh, std::move(model), optimizer);
  }
  if (sharded_degree(distribution, hp) > 1)
    return std::make_unique<Sharded>(hp, mesh, std::move(model), optimizer);
  if (hp.bf16)
    throw InvalidArgument("bf16: needs sharded_data_parallel_degree > 1 (the sharded strategy "
                          "computes in bfloat16 with float32 master weights in its shards)");
  return std::make_unique<DataParallel>(hp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
