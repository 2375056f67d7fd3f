#include "heft/train/data_parallel_strategy.h"

#include <filesystem>

#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/step_profiler/step_profiler.h"
#include "heft/train/mesh_strategy.h"

namespace heft::train {

namespace {

using detail::ddp_options;
using detail::MeshStrategy;

// Every rank a replica (of its tensor slice); DDP averages gradients over the data group
// during backward.
class DataParallel : public MeshStrategy {
 public:
  DataParallel(const Hyperparameters& hp, const config::ModelParallel& mp,
               parallel::DeviceMesh& mesh, std::shared_ptr<Model> model,
               const OptimizerConfig& optimizer)
      : MeshStrategy(hp, mp, mesh, std::move(model)),
        ddp_(model_, data_, ddp_options(hp)),
        optimizer_(make_optimizer(optimizer, model_->parameters())) {
    if (activation_checkpointing_) recompute_units();
  }

  std::string describe() const override {
    return "data_parallel (" + std::to_string(data_.size()) + " ranks" + tensor_text() + ", " +
           std::to_string(ddp_.buckets().size()) + " buckets" + (bf16_ ? ", bf16" : "") + ")";
  }

  torch::Tensor step(const Batch& batch, const Task& task, double lr) override {
    set_learning_rate(*optimizer_, lr);
    // Undefined grads: autograd hands its gradient over instead of adding it to zeros.
    for (torch::Tensor& p : model_->parameters()) p.mutable_grad().reset();
    torch::Tensor total = accumulate_gradients(
        batch, task, [this](const torch::Tensor& x) { return forward_outputs(x); },
        [this] { return ddp_.no_sync(); });
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
  bool state_copy(std::string* out) override {
    parallel::sharded::copy_part(
        parallel::sharded::replica_part(*model_, *optimizer_, hp_.optimizer, data_rank_, tensor_), out);
    return true;
  }
  // Every rank holds the replica (of its tensor slice: none is whole with tensor parallelism).
  bool replicated_state() const override { return tensor_.size == 1; }
  std::optional<std::map<std::string, std::string>> replica_state() override {
    if (tensor_.size > 1) return std::nullopt;
    return parallel::sharded::save_replica(*model_, *optimizer_, hp_.optimizer, /*replicate_rank=*/0, tensor_);
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
    parallel::module_from_bytes(*model_, files.at("model.pt"), "checkpoint " + where + ": model.pt");
    parallel::optimizer_from_bytes(*optimizer_, files.at("optimizer.pt"),
                                   "checkpoint " + where + ": optimizer.pt");
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
    // On the CPU, whatever device trained (model.pt loads on any machine); the parameters
    // keep their identity across to() (the optimizer's hold them).
    const auto params = model_->parameters();
    const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
    if (!device.is_cpu()) model_->to(torch::kCPU);
    model_->save(archive);
    if (!device.is_cpu()) model_->to(device);
    archive.save_to(dir + "/model.pt");
  }

 private:
  parallel::data::DistributedDataParallel ddp_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<Strategy> make_data_parallel_strategy(const Hyperparameters& hp,
                                                      const config::ModelParallel& mp,
                                                      parallel::DeviceMesh& mesh,
                                                      std::shared_ptr<Model> model,
                                                      const OptimizerConfig& optimizer) {
  return std::make_unique<DataParallel>(hp, mp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
