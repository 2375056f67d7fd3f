// The built-in trainer's image classifiers for 28x28 grey images and 10 classes.
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

#include <memory>
#include <string>
#include <vector>

namespace heft::train {

// A module with one forward: images (B, 1, 28, 28) -> logits (B, 10).
class Classifier : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

class Mlp : public Classifier {
 public:
  Mlp();
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

class Cnn : public Classifier {
 public:
  Cnn();
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

// The model names make_model knows: {"mlp", "cnn"}.
const std::vector<std::string>& model_names();
// A new model by name; throws heft::InvalidArgument listing model_names() otherwise.
std::shared_ptr<Classifier> make_model(const std::string& name);

}  // namespace heft::train
