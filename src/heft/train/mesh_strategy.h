// What the strategies (data_parallel_strategy.cc, sharded_strategy.cc,
// pipeline_strategy.cc) share, internal to train/: MeshStrategy, the base that holds the
// mesh's groups, who reports, the tensor-parallel layout of the model, its loss, the
// gradient-accumulation loop, gathering tensor slices into full parameters, clipping by the
// global norm, and building the sharded form of the model; and the byte counts a
// strategy's state_bytes() reports. Header-only: each strategy's translation unit includes it.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "heft/error.h"
#include "heft/parallel/data/distributed_data_parallel.h"
#include "heft/parallel/recompute.h"
#include "heft/parallel/sharded/sharded_checkpoint.h"
#include "heft/parallel/sharded/sharded_data_parallel.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/strategy.h"

namespace heft::train::detail {

inline parallel::data::DistributedDataParallelOptions ddp_options(const Hyperparameters& hp) {
  parallel::data::DistributedDataParallelOptions o;
  o.bucket_bytes = static_cast<size_t>(hp.bucket_mb * (1 << 20));
  o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
  o.bf16_compression = hp.bf16_compression;
  return o;
}

inline int64_t bytes_of(const torch::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

// The bytes of every tensor in the optimizer's state (momentum, Adam's moments and step).
inline int64_t optimizer_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* a = dynamic_cast<torch::optim::AdamWParamState*>(state.get()))
      n += bytes_of(a->exp_avg()) + bytes_of(a->exp_avg_sq()) + bytes_of(a->max_exp_avg_sq());
    else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(state.get()))
      n += bytes_of(m->momentum_buffer());
  }
  return n;
}

// bf16 for a replicated module (data parallel, tensor parallel, a pipeline's DDP stages):
// while alive, CPU autocast to bfloat16 (LibTorch's autocast: matmuls, linear layers and
// convolutions run in bfloat16, forward and so backward, from casts of the float32 master
// parameters; the casts' backward hands float32 gradients to the parameters, which DDP then
// reduces in float32). Off: nothing. Scoped to a forward pass; the cast cache is dropped
// at the outermost exit, so the next forward casts the updated parameters.
class Bf16Autocast {
 public:
  // type: the device the model computes on (CPU autocast, or CUDA's on a GPU).
  explicit Bf16Autocast(bool on, at::DeviceType type = at::kCPU) : on_(on), type_(type) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(type_);
    was_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~Bf16Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  bool on_;
  at::DeviceType type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// A share cut into k micro-batches along the batch dimension (the first ones one sample
// larger when k does not divide it). Throws heft::InvalidArgument naming
// gradient_accumulation when the share has fewer than k samples.
struct MicroBatch {
  torch::Tensor inputs, targets;
};
inline std::vector<MicroBatch> split_micro_batches(const Batch& batch, int64_t k) {
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

// What the strategies share: the mesh's groups, who reports, the tensor-parallel layout of
// the model, its loss and outputs, and gathering tensor slices into full parameters.
class MeshStrategy : public Strategy {
 protected:
  MeshStrategy(const Hyperparameters& hp, const config::ModelParallel& mp,
               parallel::DeviceMesh& mesh, std::shared_ptr<Model> model)
      : hp_(hp),
        bf16_(mp.bf16),
        activation_checkpointing_(mp.activation_checkpointing),
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
    // The trainer moves the model to its device before the strategy is made.
    const auto params = model_->parameters();
    if (!params.empty()) device_type_ = params.front().device().type();
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
  // The model's outputs for inputs, float32: with bf16 (a replicated module) computed under
  // Bf16Autocast, so the loss is taken in float32.
  torch::Tensor forward_outputs(const torch::Tensor& inputs) {
    if (!bf16_) return model_->forward(inputs);
    Bf16Autocast bf16(true, device_type_);
    return model_->forward(inputs).to(torch::kFloat);
  }
  // Forward and backward of one step over this rank's share, cut into gradient_accumulation
  // micro-batches: forward(inputs) gives a micro-batch's outputs (timed as the forward
  // phase), whose loss (loss_of) times data size / global count goes backward (so the data
  // group's average is the gradient of the global-batch mean), under the guard no_sync()
  // returns for every micro-batch but the last (gradients communicated once). Returns the
  // share's loss sum (double).
  template <class Forward, class NoSync>
  torch::Tensor accumulate_gradients(const Batch& batch, const Task& task, Forward forward,
                                     NoSync no_sync) {
    const double scale = static_cast<double>(data_.size()) / static_cast<double>(batch.global_count);
    torch::Tensor total = torch::zeros({}, torch::kDouble);
    const std::vector<MicroBatch> micro = split_micro_batches(batch, hp_.gradient_accumulation);
    for (size_t m = 0; m < micro.size(); ++m) {
      torch::Tensor loss_sum = [&] {
        auto timed = profile::phase(profile::Phase::kForward);
        return loss_of(forward(micro[m].inputs), micro[m].targets, task);
      }();
      total += loss_sum.detach().to(torch::kCPU, torch::kDouble);
      auto timed = profile::phase(profile::Phase::kBackward);
      if (m + 1 < micro.size()) {
        auto guard = no_sync();
        (loss_sum * scale).backward();
      } else {
        (loss_sum * scale).backward();
      }
    }
    return total;
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
  // Activation checkpointing of the model's units (a dropped unit: nothing to recompute) on a
  // replicated module. With bf16 the recomputation in backward runs under the forward's
  // autocast too (it runs outside the forward's scope), so it computes what forward did.
  void recompute_units() {
    std::vector<std::vector<torch::Tensor>> params;
    for (const auto& unit : model_->units())
      params.push_back(unit ? unit->parameters() : std::vector<torch::Tensor>{});
    const bool bf16 = bf16_;
    const at::DeviceType type = device_type_;
    model_->set_unit_runner([params, bf16, type](size_t i, const torch::Tensor& x,
                                                 const Model::UnitFn& f) {
      Model::UnitFn unit = f;
      if (bf16)
        unit = [f, type](const torch::Tensor& in) {
          Bf16Autocast autocast(true, type);
          return f(in);
        };
      return parallel::recompute_in_backward(x, unit, params.at(i));
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
      const double sq = squared_norm(g);
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
    o.activation_checkpointing = activation_checkpointing_;
    if (bf16_) o.compute_dtype = torch::kBFloat16;
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
      const double sq = squared_norm(g);
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
  // The resolved distribution's (config::Distribution::with_overrides) precision and
  // recomputation.
  const bool bf16_;
  const bool activation_checkpointing_;
  parallel::ProcessGroup& data_;
  parallel::ProcessGroup& tensor_group_;
  const int data_rank_;
  const bool reports_;
  std::shared_ptr<Model> model_;
  at::DeviceType device_type_ = at::kCPU;  // where the model computes (hyperparameter device)
  parallel::sharded::TensorLayout tensor_;
};

}  // namespace heft::train::detail
