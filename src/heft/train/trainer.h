// The built-in trainer's loop: it knows no model, task or strategy by name. It builds the
// device mesh the distribution config asks for, the task of the model (task.h), the model
// from the registry (models.h) and the strategy (strategy.h), then runs epochs of steps,
// evaluation, metric lines and checkpoints.
//
// Every rank calls train() with the same hyperparameters and distribution. Each step, each
// data-parallel rank trains on its share of the global batch; the strategy makes the
// gradients those of the global-batch mean loss. The one rank the strategy names (the first
// data-parallel rank with data parallelism) writes to `out`, one line each, `key=value`
// separated by spaces:
//   step=N epoch=E loss=L lr=X samples_per_s=S        every log_every steps and the last
//   epoch=E test_loss=L test_acc=A                     after each epoch, when eval is on
//                                                      (the task's evaluation metrics)
//   step_time: median_s=M worst_s=W steps=N          (gpt: before final:, TrainResult's)
//   final: step=N loss=L test_acc=A samples_per_s=S seconds=T
//                                                      (the task's metric_names(), nan when
//                                                      eval is off)
// N counts steps from 1, E epochs from 1. loss is the mean over the whole global batch of
// step N (reduced across ranks, so it compares with one process). samples_per_s counts the
// samples of all ranks over the training loop's wall time since the previous line (step
// lines) or in all (final), without evaluation, data loading and set-up; seconds is that
// time. The held-out set is split across data-parallel ranks for evaluation and the sums
// are reduced.
//
// Checkpoints (hp.checkpoint_dir not empty; heft/parallel/checkpoint_dir.h has the format): at
// start every rank loads the newest valid checkpoint there (its own part, for a strategy
// whose ranks write parts), if any, and the reporting rank prints
//   resumed: step=N epoch=E
// The run then continues exactly where that one stopped: the strategy's state (parameters,
// buffers, optimizer state), step (and with it the learning-rate schedule), the epoch and
// the position within it, and torch's CPU generator state are restored, so a run
// interrupted and resumed any number of times ends with the loss and parameters of an
// uninterrupted one (same hyperparameters, ranks and threads). A checkpoint (data parallel:
// world rank 0 writes model.pt, optimizer.pt, rng.pt; meta {"step", "epoch", "next_batch",
// "loss", and the task's metrics}) is saved every hp.checkpoint_every steps (0: never in
// between), when stopped, and at the end, keeping hp.checkpoint_keep (0 means 2). `stop`,
// when given, is polled at every step boundary; once set on any rank (agreed with a
// collective when there are several), the run saves a checkpoint and returns with
// TrainResult::stopped, printing no final: line.
//
// Throws what the data loader throws (heft::IoError, heft::InvalidArgument naming the file),
// heft::InvalidArgument for a global batch smaller than the number of data-parallel ranks
// or a distribution the trainer cannot run, and the collectives' errors (heft::PeerLost,
// heft::Timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/config/distribution.h"
#include "heft/train/hyperparameters.h"
#include "heft/train/task.h"

namespace heft::train {

struct TrainResult {
  int64_t steps = 0;
  double loss = 0;           // global-batch mean loss of the last step
  Metrics metrics;           // the task's metric_names() after the last evaluation (nan: none)
  double samples_per_s = 0;  // all ranks, training loop only
  double seconds = 0;        // training loop wall time
  bool stopped = false;      // `stop` was set: checkpointed and returned early
  int64_t resumed_from = 0;  // the step of the checkpoint the run resumed from; 0: none
  // Wall seconds of this rank's steps (batch + strategy step) after the first (the only one
  // when there is one): median and largest.
  double median_step_s = 0;
  double worst_step_s = 0;
};

// In-place recovery (docs/recovery.md): what a rank carries from a world that lost a peer
// into the re-formed one. The caller (heft-train's main) keeps it across train() calls: when a
// collective throws heft::PeerLost, train() leaves here the states this rank holds and
// rethrows; the caller rejoins the next generation's world and calls train() again, which
// then does not resume from disk:
//  - data parallel (Strategy::replicated_state): every rank's replica is a whole state; the
//    ranks agree on the newest step any holds (a restarted rank holds none), the lowest rank
//    holding it broadcasts it;
//  - every other strategy (sharded, hybrid, tensor, pipeline: each rank's part is its own): each
//    rank sends its part to a buddy on another host (rank + LOCAL_WORLD_SIZE, or the next rank
//    on one host) at the end of every step and keeps its own; the ranks agree on the newest
//    step for which every part is held (a restarted rank's by its buddy), the buddy hands the
//    restarted rank its part, and every rank loads all the parts (the checkpoint's reader).
//    When no such step exists (the buddy was lost too), every rank fails with a message
//    saying so and the launcher restarts the group from its checkpoints.
// The reporting rank prints
//   recovered: generation=G step=T source_rank=S restarted_ranks=R state_bytes=B seconds=X
// (seconds: from this rank's loss of its peer, or its start, to the state loaded; source_rank
// -1 with buddies).
struct Recovery {
  struct Copy {
    int64_t step = -1;
    std::string blob;  // the state at `step`, packed (trainer.cc)
  };
  bool enabled = false;  // HEFT_RECOVERY=in_place
  int generation = 0;    // the world this rank is in (HEFT_GENERATION, then each rejoin's)
  std::vector<Copy> own;   // this rank's states at completed steps, oldest first
  std::vector<Copy> kept;  // its buddy-source's parts (buddies only), oldest first
  std::chrono::steady_clock::time_point lost_at = std::chrono::steady_clock::now();
  bool holds() const { return !own.empty(); }
  int64_t newest() const { return own.empty() ? -1 : own.back().step; }
};

// `distribution` is resolved (config::Distribution::with_overrides): it alone sets the
// parallelism, bf16 and activation_checkpointing. hp.data must name the directory with the task's training data; test_dir the one with its
// held-out data (usually the same). When hp.model_dir is not empty, the strategy saves the
// model there as model.pt (torch::serialize archive), creating the directory. `world` is
// every rank of the job.
TrainResult train(const Hyperparameters& hp, const config::Distribution& distribution,
                  const std::string& test_dir, comm::Communicator& world, std::ostream& out,
                  const std::atomic<bool>* stop = nullptr, Recovery* recovery = nullptr);

}  // namespace heft::train
