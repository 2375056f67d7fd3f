#include "heft/train/strategy.h"

#include <filesystem>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/parallel/data/distributed_data_parallel.h"

namespace heft::train {

namespace {

parallel::data::DistributedDataParallelOptions ddp_options(const Hyperparameters& hp) {
  parallel::data::DistributedDataParallelOptions o;
  o.bucket_bytes = static_cast<size_t>(hp.bucket_mb * (1 << 20));
  o.first_bucket_bytes = std::min(o.first_bucket_bytes, o.bucket_bytes);
  o.bf16_compression = hp.bf16_compression;
  return o;
}

// Every rank a replica; DDP averages gradients over the data group during backward.
class DataParallel : public Strategy {
 public:
  DataParallel(const Hyperparameters& hp, parallel::DeviceMesh& mesh,
               std::shared_ptr<Model> model, const OptimizerConfig& optimizer)
      : group_(mesh.group(parallel::Dim::kData)),
        model_(std::move(model)),
        ddp_(model_, group_, ddp_options(hp)),
        optimizer_(make_optimizer(optimizer, model_->parameters())) {}

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
    torch::Tensor loss_sum = task.loss_sum(model_->forward(batch.inputs), batch.targets);
    // The global mean times the group size: DDP's average over ranks then gives the gradient
    // of the global mean, whatever this rank's share.
    (loss_sum * (static_cast<double>(group_.size()) / static_cast<double>(batch.global_count)))
        .backward();
    optimizer_->step();
    return loss_sum.detach();
  }

  torch::Tensor evaluate(const torch::Tensor& inputs) override {
    torch::NoGradGuard no_grad;
    model_->eval();
    torch::Tensor out = model_->forward(inputs);
    model_->train();
    return out;
  }

  bool single_writer() const override { return true; }
  std::map<std::string, std::string> state() override {
    return {{"model.pt", parallel::module_to_bytes(*model_)},
            {"optimizer.pt", parallel::optimizer_to_bytes(*optimizer_)}};
  }
  void load_state(const std::map<std::string, std::string>& files,
                  const std::string& where) override {
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
  parallel::ProcessGroup& group_;
  std::shared_ptr<Model> model_;
  parallel::data::DistributedDataParallel ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

parallel::MeshShape mesh_shape(const config::Distribution& distribution, int world) {
  parallel::MeshShape shape;
  shape.data = distribution.data_parallel_degree(world);
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
  return std::make_unique<DataParallel>(hp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
