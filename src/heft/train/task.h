// A training task: what heft-train trains a model on and how it is judged, apart from the
// model (models.h), the parallel strategy (strategy.h) and the loop (trainer.h).
//
// A task owns its data and splits every global batch over the data-parallel ranks (the
// data group of the mesh, not the world: ranks of one pipeline or tensor group share a
// batch), defines the loss as a sum over the samples (or tokens) of a rank's share, with
// the global count it is averaged over, evaluates a model on held-out data split over the
// data group, and names the metric lines that evaluation prints.
//
// Tasks: "image" (Fashion-MNIST classification; the classifiers of models.h), "text" (the
// GPT on the fortunes corpus; text.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "heft/parallel/process_group.h"
#include "heft/train/hyperparameters.h"

namespace heft::train {

// This data-parallel rank's share of one global batch.
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  int64_t samples = 0;         // samples of the whole global batch (all data-parallel ranks)
  int64_t global_count = 0;    // what the mean loss divides by: samples, or tokens
};

// Named values in print order ("test_loss", "test_acc").
using Metrics = std::vector<std::pair<std::string, double>>;

class Task {
 public:
  virtual ~Task() = default;

  // Global batches per epoch, the same on every rank.
  virtual int64_t steps_per_epoch() const = 0;
  // Draws epoch's order (0-based).
  virtual void set_epoch(int64_t epoch) = 0;
  // This data-parallel rank's share of step `step` (0-based, within the epoch).
  virtual Batch batch(int64_t step) const = 0;
  // The loss summed over a share's samples (or tokens): a scalar with its graph.
  virtual torch::Tensor loss_sum(const torch::Tensor& outputs, const torch::Tensor& targets) const = 0;

  // Evaluates `forward` (the model's, in eval mode, without grad) on the held-out data, each
  // data-parallel rank its part, the sums reduced over `data_group` (collective).
  using Forward = std::function<torch::Tensor(const torch::Tensor&)>;
  virtual Metrics evaluate(const Forward& forward, parallel::ProcessGroup& data_group) const = 0;
  // The names evaluate() returns, in order; the final: line prints them (nan before the
  // first evaluation).
  virtual std::vector<std::string> metric_names() const = 0;
  // Tokens per sample for a tokens_per_s figure (text: block_size); 0: not a token task.
  virtual int64_t tokens_per_sample() const { return 0; }
};

// The task named `name` (a ModelEntry's task) for data-parallel rank `data_rank` of
// `data_size`, reading hp.data (and test_dir for held-out data when hp.eval). Throws what
// its loader throws (heft::IoError, heft::InvalidArgument naming the file or value).
std::unique_ptr<Task> make_task(const std::string& name, const Hyperparameters& hp,
                                const std::string& test_dir, int data_rank, int data_size);

}  // namespace heft::train
