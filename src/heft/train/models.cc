#include "heft/train/models.h"

#include "heft/error.h"
#include "heft/parallel/mesh.h"
#include "heft/train/gpt.h"

namespace heft::train {

namespace nn = torch::nn;

Mlp::Mlp() {
  fc1_ = register_module("fc1", nn::Linear(784, 512));
  fc2_ = register_module("fc2", nn::Linear(512, 256));
  fc3_ = register_module("fc3", nn::Linear(256, 10));
}

torch::Tensor Mlp::forward(torch::Tensor x) {
  x = x.flatten(1);              // (B, 784)
  x = fc1_->forward(x).relu_();  // (B, 512)
  x = fc2_->forward(x).relu_();  // (B, 256)
  return fc3_->forward(x);       // (B, 10)
}

Cnn::Cnn() {
  conv1_ = register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 5)));
  conv2_ = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 5)));
  fc1_ = register_module("fc1", nn::Linear(1024, 512));
  fc2_ = register_module("fc2", nn::Linear(512, 10));
  // Channels-last weights make oneDNN run the convolutions without reordering, keep their
  // outputs channels-last, and give max-pooling its vectorised kernel: about a quarter off
  // a training step on CPU. A copy through to(): contiguous(ChannelsLast) keeps conv1's
  // (32, 1, 5, 5) weight as it is, since with one input channel it already counts as
  // channels-last, and the convolution would then not take the channels-last path.
  torch::NoGradGuard no_grad;
  for (auto* conv : {&conv1_, &conv2_}) {
    torch::Tensor& w = (*conv)->weight;
    w.set_data(w.to(w.options(), /*non_blocking=*/false, /*copy=*/true,
                    torch::MemoryFormat::ChannelsLast));
  }
}

torch::Tensor Cnn::forward(torch::Tensor x) {
  x = torch::max_pool2d(conv1_->forward(x).relu_(), 2);  // (B, 32, 12, 12)
  x = torch::max_pool2d(conv2_->forward(x).relu_(), 2);  // (B, 64, 4, 4)
  x = fc1_->forward(x.flatten(1)).relu_();               // (B, 512)
  return fc2_->forward(x);                               // (B, 10)
}

const std::vector<ModelEntry>& model_registry() {
  static const std::vector<ModelEntry> registry{
      {"mlp", "image", [](const ModelContext&) { return std::make_shared<Mlp>(); }},
      {"cnn", "image", [](const ModelContext&) { return std::make_shared<Cnn>(); }},
      {"gpt", "text",
       [](const ModelContext& c) {
         GptConfig g;
         g.n_layer = c.hp.n_layer;
         g.n_head = c.hp.n_head;
         g.n_embd = c.hp.n_embd;
         g.block_size = c.hp.block_size;
         g.vocab = c.hp.vocab;
         if (c.mesh && c.mesh->size(parallel::Dim::kTensor) > 1)
           return std::shared_ptr<Model>(
               std::make_shared<TensorParallelGpt>(g, c.mesh->group(parallel::Dim::kTensor)));
         return std::shared_ptr<Model>(std::make_shared<Gpt>(g));
       },
       /*decay_matrices_only=*/true},
  };
  return registry;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const ModelEntry& e : model_registry()) names.push_back(e.name);
  return names;
}

const ModelEntry& find_model(const std::string& name) {
  for (const ModelEntry& e : model_registry())
    if (e.name == name) return e;
  std::string known;
  for (const std::string& n : model_names()) known += (known.empty() ? "" : ", ") + n;
  throw InvalidArgument("unknown model '" + name + "': expected one of " + known);
}

std::shared_ptr<Model> make_model(const std::string& name, const ModelContext& context) {
  const ModelEntry& e = find_model(name);
  if (context.mesh && context.mesh->size(parallel::Dim::kTensor) > 1 && e.task != "text")
    throw InvalidArgument("tensor_parallel_degree: model " + name +
                          " has no tensor-parallel form (gpt has)");
  return e.make(context);
}

}  // namespace heft::train
