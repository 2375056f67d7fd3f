// The built-in trainer's models and their registry.
//
// A Model is a torch module with one forward (inputs -> outputs) that names the task it is
// trained on (task.h). The image classifiers, for 28x28 grey images and 10 classes:
//
//  mlp: flatten - linear(784->512) - ReLU - linear(512->256) - ReLU - linear(256->10)
//  cnn: conv(1->32, 5x5) - ReLU - maxpool(2) - conv(32->64, 5x5) - ReLU - maxpool(2) -
//       linear(1024->512) - ReLU - linear(512->10)
//       (the CNN of ../shared/peers/ddp_torch.py, so the two can be timed side by side;
//       its convolutions run channels-last, which changes speed, not results)
// Inputs: (B, 1, 28, 28) float, normalised (fashion_mnist.h); outputs: (B, 10) logits.
// Parameters are initialised with LibTorch's defaults from the global torch generator:
// call torch::manual_seed first for a reproducible model.
// Deliberately left out: batch norm, dropout (nothing here needs them to reach 0.9).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "heft/parallel/tensor/tensor_parallel.h"
#include "heft/train/hyperparameters.h"

namespace heft::parallel {
class DeviceMesh;
}

namespace heft::train {

// A module with one forward: for the classifiers images (B, 1, 28, 28) -> logits (B, 10).
//
// A model may name units (sub-modules run one after another, such as a GPT's blocks) for
// the strategies that treat them one at a time: sharded data parallel gathers a unit's
// parameters just before it runs, activation checkpointing recomputes it in backward. Such
// a model runs every unit through run_unit(i, x, f), which calls the runner a strategy set
// (by default f(x)).
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  virtual std::vector<std::shared_ptr<torch::nn::Module>> units() { return {}; }

  // Tensor parallelism: a model whose layers are split over the mesh's tensor group says how
  // each parameter is cut from the full model's (by name; absent: replicated), computes its
  // loss from its split outputs (the vocabulary-parallel cross-entropy; undefined: the
  // task's loss on the outputs), and gathers its outputs whole for evaluation.
  virtual std::map<std::string, parallel::tensor::Split> tensor_splits() const { return {}; }
  virtual torch::Tensor loss_sum(const torch::Tensor& /*outputs*/, const torch::Tensor& /*targets*/) {
    return {};
  }
  virtual torch::Tensor full_outputs(const torch::Tensor& outputs) { return outputs; }

  // Pipeline parallelism: the model as an ordered list of layers (empty: it cannot be
  // pipelined). forward_range runs layers [first, last] on x (the model's input when first
  // is 0, else the activation layer first-1 produced); keep_layers drops the parameters of
  // every layer i with !keep[i] (a stage keeps its own), after which units() holds null for
  // the dropped units.
  virtual std::vector<std::string> layer_names() const { return {}; }
  virtual torch::Tensor forward_range(int /*first*/, int /*last*/, const torch::Tensor& x) {
    return forward(x);
  }
  virtual void keep_layers(const std::vector<bool>& /*keep*/) {}
  // For profiling: layer i's parameters, and an input of `batch` samples.
  virtual std::vector<torch::Tensor> layer_parameters(int /*layer*/) { return {}; }
  virtual torch::Tensor sample_input(int64_t /*batch*/) const { return {}; }

  using UnitFn = std::function<torch::Tensor(const torch::Tensor&)>;
  using UnitRunner = std::function<torch::Tensor(size_t unit, const torch::Tensor& x, const UnitFn& f)>;
  void set_unit_runner(UnitRunner runner) { runner_ = std::move(runner); }

 protected:
  torch::Tensor run_unit(size_t unit, const torch::Tensor& x, const UnitFn& f) {
    return runner_ ? runner_(unit, x, f) : f(x);
  }

 private:
  UnitRunner runner_;
};

class Mlp : public Model {
 public:
  Mlp();
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

class Cnn : public Model {
 public:
  Cnn();
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// The registry: every model heft-train knows, with the task it trains on ("image" for the
// classifiers on Fashion-MNIST) and how to build it. Models are built from the
// hyperparameters (sizes, for those that have them) and the mesh (a tensor-parallel model
// keeps its slice) after torch::manual_seed(seed).
struct ModelContext {
  Hyperparameters hp;                      // defaults when built outside heft-train
  parallel::DeviceMesh* mesh = nullptr;    // null: one process, no model parallelism
};
struct ModelEntry {
  std::string name;
  std::string task;
  std::function<std::shared_ptr<Model>(const ModelContext&)> make;
  bool decay_matrices_only = false;  // weight decay on matrices only (gpt)
};
const std::vector<ModelEntry>& model_registry();
// The registry's names, in order: {"mlp", "cnn", "gpt"} (gpt.h; task "text").
std::vector<std::string> model_names();
// The entry named `name`; throws heft::InvalidArgument listing model_names() otherwise.
const ModelEntry& find_model(const std::string& name);
// find_model(name).make(context).
std::shared_ptr<Model> make_model(const std::string& name, const ModelContext& context = {});

}  // namespace heft::train
