// The built-in trainer's loop: Fashion-MNIST, a model from models.h, data parallel over a
// ProcessGroup with DistributedDataParallel, and the metric lines a job's supervisor reads.
//
// Every rank calls train() with the same hyperparameters. Each step, rank r trains on its
// share of the global batch (DistributedSampler), its loss weighted so that the average of
// the ranks' gradients is the gradient of the global-batch mean loss. Rank 0 writes to
// `out` (nothing on the other ranks), one line each, `key=value` separated by spaces:
//   step=N epoch=E loss=L lr=X samples_per_s=S        every log_every steps and the last
//   epoch=E test_loss=L test_acc=A                     after each epoch, when eval is on
//   final: step=N loss=L test_acc=A samples_per_s=S seconds=T
// N counts steps from 1, E epochs from 1. loss is the mean over the whole global batch of
// step N (reduced across ranks, so it compares with one process). samples_per_s counts the
// samples of all ranks over the training loop's wall time since the previous line (step
// lines) or in all (final), without evaluation, data loading and set-up; seconds is that
// time. test_acc is nan when eval is off. The test set is split across ranks for
// evaluation and the counts are summed.
//
//
// Checkpoints (hp.checkpoint_dir not empty; heft/parallel/checkpoint.h has the format): at
// start every rank loads the newest valid checkpoint there, if any, and rank 0 prints
//   resumed: step=N epoch=E
// The run then continues exactly where that one stopped: parameters, buffers, optimizer
// state (momentum), step (and with it the learning-rate schedule), the epoch and the
// position within it, and torch's CPU generator state are restored, so a run interrupted
// and resumed any number of times ends with the loss and parameters of an uninterrupted
// one (same hyperparameters, ranks and threads). Rank 0 saves one (files model.pt,
// optimizer.pt, rng.pt; meta {"step", "epoch", "next_batch", "loss", "test_acc"}) every
// hp.checkpoint_every steps (0: never in between), when stopped, and at the end, keeping
// hp.checkpoint_keep (0 means 2). `stop`, when given, is polled at every step boundary;
// once set on any rank (agreed with a collective when there are several), the run saves a
// checkpoint and returns with TrainResult::stopped, printing no final: line.
//
// Throws what the data loader throws (heft::IoError, heft::InvalidArgument naming the file),
// heft::InvalidArgument for a global batch smaller than the number of ranks, and the
// collectives' errors (heft::PeerLost, heft::Timeout).
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>
#include <string>

#include "heft/parallel/process_group.h"
#include "heft/train/hyperparameters.h"

namespace heft::train {

struct TrainResult {
  int64_t steps = 0;
  double loss = 0;           // global-batch mean loss of the last step
  double test_acc = 0;       // after the last epoch; nan when eval is off
  double samples_per_s = 0;  // all ranks, training loop only
  double seconds = 0;        // training loop wall time
  bool stopped = false;      // `stop` was set: checkpointed and returned early
  int64_t resumed_from = 0;  // the step of the checkpoint the run resumed from; 0: none
};

// hp.data must name the directory with the train-* files; test_dir the one with t10k-*
// (usually the same). When hp.model_dir is not empty, rank 0 saves the model there as
// model.pt (torch::serialize archive), creating the directory.
TrainResult train(const Hyperparameters& hp, const std::string& test_dir,
                  parallel::ProcessGroup& group, std::ostream& out,
                  const std::atomic<bool>* stop = nullptr);

}  // namespace heft::train
