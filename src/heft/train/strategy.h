// A parallel strategy: how one training step runs over the mesh. The loop (trainer.h) asks
// the task for this rank's share of a batch and hands it to the strategy; the strategy runs
// forward, the task's loss, backward, whatever communication it needs and the optimizer
// step, and answers the questions that depend on it: which ranks split the data (its data
// group), whether this rank holds the loss and prints the job's lines (with a pipeline only
// the last stage does; with data parallelism the first data-parallel rank), and what this
// rank writes to a checkpoint.
//
// Strategies, one file each: "data_parallel" (data_parallel_strategy.h: DistributedDataParallel
// over the mesh's data group; each rank a full replica) and "sharded_data_parallel"
// (sharded_strategy.h, parallel/sharded: parameters, gradients and optimizer state sharded
// over the mesh's shard group, hybrid across its replicate group), chosen by
// sharded_data_parallel_degree > 1, each tensor-parallel inside when the model is;
// both take gradient_accumulation (micro-batches, communicating on the last), grad_clip
// (global norm) and activation_checkpointing (the model's units). partitions > 1 chooses the
// pipelined strategy (pipeline_strategy.h), whose stages are either of the two. bf16 runs
// under every strategy: forward and backward in bfloat16, float32 master parameters and
// optimizer state, gradients reduced in float32 (sharded: bfloat16 gathers of the float32
// shards; replicated modules: CPU autocast, mesh_strategy.h's Bf16Autocast), the loss taken
// in float32. The degrees, bf16 and activation_checkpointing come from the resolved
// config::Distribution (Distribution::with_overrides); gradient_accumulation, grad_clip and
// zero_stage from the hyperparameters.
//
//   loop                      strategy (DDP)                      parallel/
//   task.batch(step) ──────▶ step(batch, task, lr)
//                              model.forward(inputs)
//                              task.loss_sum × data_size/global ─▶ backward: bucket hooks
//                                                                  allreduce_async(avg)
//                              optimizer.step()
//   loss sum ◀─────────────── (this rank's share)
//   allreduce over data group, print if reports()
#pragma once

#include <torch/torch.h>

#include <map>
#include <optional>
#include <memory>
#include <string>

#include "heft/config/distribution.h"
#include "heft/parallel/mesh.h"
#include "heft/parallel/process_group.h"
#include "heft/train/hyperparameters.h"
#include "heft/train/models.h"
#include "heft/train/optimizer.h"
#include "heft/train/task.h"

namespace heft::train {

// Bytes of state a rank holds between steps.
struct StateBytes {
  int64_t params = 0;     // parameter storage (a sharded strategy: its shards)
  int64_t grads = 0;      // gradient storage kept between steps (buckets, shard grads)
  int64_t optimizer = 0;  // optimizer state (momentum, Adam moments)
};

class Strategy {
 public:
  virtual ~Strategy() = default;

  // "data_parallel (2 ranks)", for logs.
  virtual std::string describe() const = 0;
  // This rank's part of the model (the whole model with data parallelism).
  virtual Model& model() = 0;
  // The ranks the task splits each batch over, and over which the step's loss is summed.
  virtual parallel::ProcessGroup& data_group() = 0;
  // Whether this rank prints the job's metric lines (exactly one rank of the world does).
  virtual bool reports() const = 0;

  // One optimizer step at learning rate lr on this rank's share of a global batch: the
  // gradients are those of the task's loss averaged over the whole global batch. Returns
  // the share's loss sum (a detached scalar; zero on ranks that hold no loss).
  virtual torch::Tensor step(const Batch& batch, const Task& task, double lr) = 0;
  // The global loss sum of a step from this rank's share (step()'s result): summed over the
  // data group, and with a pipeline taken from the last stage, the same on every rank
  // (collective).
  virtual double loss_total(const torch::Tensor& loss_sum) = 0;
  // The model's outputs for inputs, without grad, in eval mode (evaluation).
  virtual torch::Tensor evaluate(const torch::Tensor& inputs) = 0;

  // Checkpoints. single_writer(): world rank 0 writes every file; otherwise each rank
  // writes its part (a collective commit). state() is this rank's files (parameters,
  // optimizer state). load_state() gets every part of the checkpoint being resumed (one
  // for a single writer) and restores what this rank holds, resharding when the checkpoint
  // was written by another layout (a sharded checkpoint loads at any world size and
  // degree, and into data parallel). Throws heft::IoError naming `where` and the file when
  // one is missing, heft::InvalidArgument naming the parameter when the checkpoint is of
  // another model or shape; nothing is changed then.
  virtual bool single_writer() const = 0;
  virtual std::map<std::string, std::string> state() = 0;
  virtual void load_state(const std::vector<std::map<std::string, std::string>>& parts,
                          const std::string& where) = 0;
  virtual StateBytes state_bytes() = 0;
  // In-place recovery (trainer.h): when every rank holds the whole training state (data
  // parallelism without tensor or pipeline splits), this rank's state written as the first
  // replica's part, which load_state() takes on any rank (a lost rank's state is any
  // survivor's). nullopt where a rank's part is its own, which no survivor holds (sharded,
  // tensor, pipeline: a buddy keeps a copy). Local: no collective.
  virtual std::optional<std::map<std::string, std::string>> replica_state() { return std::nullopt; }
  // state() copied as it is into *out, whose capacity is reused (parallel::sharded::copy_part:
  // a memcpy of the live tensors, no pickling): the buddies' copy at every step boundary,
  // turned back into state()'s files by parallel::sharded::files_from_copy only when a
  // recovery needs it. false: the strategy has no such form (the trainer takes state()).
  virtual bool state_copy(std::string* /*out*/) { return false; }
  // Whether replica_state() has a state (the same answer on every rank of a run).
  virtual bool replicated_state() const { return false; }
  // Lines about the strategy's own work for the end of a run (may be empty): a pipeline
  // stage's busy share of its steps.
  virtual std::string summary() const { return ""; }
  // Every parameter of the model at full size, by name (collective: a sharded strategy
  // gathers them).
  virtual std::map<std::string, torch::Tensor> full_parameters() = 0;

  // Writes the trained model to dir/model.pt (on the ranks that hold it; collective).
  virtual void save_model(const std::string& dir) = 0;
};

// The strategy the distribution asks for, for a model built on `mesh`, with the optimizer
// `optimizer`. `distribution` is resolved (config::Distribution::with_overrides): its
// modelparallel alone decides the parallelism, bf16 and activation_checkpointing (hp gives
// the rest: gradient_accumulation, grad_clip, zero_stage, the optimizer's name). Throws
// heft::InvalidArgument for what it cannot run.
std::unique_ptr<Strategy> make_strategy(const config::Distribution& distribution,
                                        const Hyperparameters& hp, parallel::DeviceMesh& mesh,
                                        std::shared_ptr<Model> model,
                                        const OptimizerConfig& optimizer);

// The mesh shape a resolved distribution asks for on `world` ranks. Throws
// heft::InvalidArgument with Distribution::check_world's message when the degrees do not
// fit the world.
parallel::MeshShape mesh_shape(const config::Distribution& distribution, int world);

}  // namespace heft::train
