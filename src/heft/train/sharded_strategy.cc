#include "heft/train/sharded_strategy.h"

#include "heft/error.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/mesh_strategy.h"

namespace heft::train {

namespace {

using detail::MeshStrategy;
using detail::optimizer_state_bytes;

// Parameters, gradients and optimizer state sharded over the mesh's shard group, averaged
// across its replicate group (hybrid) when the shard group is smaller than the data group.
class Sharded : public MeshStrategy {
 public:
  Sharded(const Hyperparameters& hp, const config::ModelParallel& mp, parallel::DeviceMesh& mesh,
          std::shared_ptr<Model> model, const OptimizerConfig& optimizer)
      : MeshStrategy(hp, mp, mesh, std::move(model)),
        replicate_rank_(mesh.coordinate(parallel::Dim::kReplicate)),
        sdp_(shard_model(mesh, optimizer)),
        optimizer_(shard_optimizer(*sdp_, optimizer)) {}

  std::string describe() const override {
    const int shard = sdp_->shard_group().size();
    return "sharded_data_parallel (shard " + std::to_string(shard) + " x replicate " +
           std::to_string(data_.size() / shard) + tensor_text() + ", ZeRO-" +
           std::to_string(hp_.zero_stage) + (bf16_ ? ", bf16" : "") + ", " +
           std::to_string(sdp_->flats().size()) + " flat parameters)";
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    torch::Tensor total = accumulate_gradients(
        batch, task,
        [this](const torch::Tensor& x) {
          sdp_->begin_forward();
          return model_->forward(x);
        },
        [this] { return sdp_->no_sync(); });
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
  bool state_copy(std::string* out) override {
    parallel::sharded::copy_part(
        parallel::sharded::shards_part(*sdp_, *optimizer_, hp_.optimizer, replicate_rank_, tensor_), out);
    return true;
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

std::unique_ptr<Strategy> make_sharded_strategy(const Hyperparameters& hp,
                                                const config::ModelParallel& mp,
                                                parallel::DeviceMesh& mesh,
                                                std::shared_ptr<Model> model,
                                                const OptimizerConfig& optimizer) {
  return std::make_unique<Sharded>(hp, mp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
