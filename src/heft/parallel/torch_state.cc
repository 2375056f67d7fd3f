#include "heft/parallel/torch_state.h"

#include <mutex>
#include <sstream>

namespace heft::parallel {

namespace {

std::string bytes_of(torch::serialize::OutputArchive& archive) {
  std::ostringstream s;
  archive.save_to(s);
  return s.str();
}

void load(torch::serialize::InputArchive& archive, const std::string& bytes) {
  archive.load_from(bytes.data(), bytes.size());
}

// Like Module::load, but copies into the existing tensors rather than swapping their
// storage (Module::load's set_), so that views and references held elsewhere (DDP's
// buckets, the optimizer) see the loaded values.
void copy_from_archive(torch::nn::Module& module, torch::serialize::InputArchive& archive) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.named_parameters(/*recurse=*/false)) {
    torch::Tensor t;
    archive.read(p.key(), t);
    p.value().copy_(t);
  }
  for (auto& b : module.named_buffers(/*recurse=*/false)) {
    torch::Tensor t;
    archive.read(b.key(), t, /*is_buffer=*/true);
    b.value().copy_(t);
  }
  for (auto& c : module.named_children()) {
    torch::serialize::InputArchive sub;
    archive.read(c.key(), sub);
    copy_from_archive(*c.value(), sub);
  }
}

}  // namespace

std::string module_to_bytes(const torch::nn::Module& module) {
  torch::serialize::OutputArchive archive;
  module.save(archive);
  return bytes_of(archive);
}

void module_from_bytes(torch::nn::Module& module, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  load(archive, bytes);
  copy_from_archive(module, archive);
}

std::string optimizer_to_bytes(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  return bytes_of(archive);
}

void optimizer_from_bytes(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  load(archive, bytes);
  optimizer.load(archive);
}

std::string rng_to_bytes() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  torch::Tensor state;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    state = gen.get_state();
  }
  torch::serialize::OutputArchive archive;
  archive.write("cpu", state);
  return bytes_of(archive);
}

void rng_from_bytes(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  load(archive, bytes);
  torch::Tensor state;
  archive.read("cpu", state);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

}  // namespace heft::parallel
