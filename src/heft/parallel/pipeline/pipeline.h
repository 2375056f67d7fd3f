// The pipeline runtime: runs one stage's action list (schedule.h) for a step. Activations go
// forward and their gradients backward between neighbouring stages with tagged
// point-to-point exchanges (ProcessGroup::exchange over the pipeline group: the
// communication actions between two compute actions form one exchange, so neighbours that
// both send first never deadlock); their shapes are agreed once (the caller says them), not
// sent per micro-batch. A stage's backward runs torch::autograd::backward on its outputs
// with the received gradients; the last stage's output is its loss.
//
// Step phases (step_profiler/step_profiler.h): each forward action is timed as the step's forward
// phase, each backward action (with what around_backward wraps it in) as its backward phase,
// and the waits for exchanges as its communication phase (ProcessGroup's Work).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "heft/parallel/pipeline/schedule.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel::pipeline {

struct StageFunctions {
  // Micro-batch m's forward through this stage's model chunk `chunk` (0 without virtual
  // stages). `input` is the received activation (a leaf requiring grad) or undefined on the
  // first virtual stage. Returns the activation to send, or on the last virtual stage the
  // (scaled) loss to run backward from.
  std::function<torch::Tensor(int chunk, int m, const torch::Tensor& input)> forward;
  // Wraps micro-batch m's backward (for example in DDP's no_sync for all but the last):
  // calls run() once. May be empty.
  std::function<void(int m, bool last_backward, const std::function<void()>& run)> around_backward;
  // The shape of the activation this stage receives (and the previous one sends) for m.
  std::function<std::vector<int64_t>(int m)> activation_shape;
  torch::ScalarType dtype = torch::kFloat;
};

struct PipelineCounters {
  int64_t exchanges = 0;  // batches of communication actions issued
  int64_t sends = 0, recvs = 0;
  double busy_seconds = 0;     // in forward and backward compute
  double forward_seconds = 0;  // of which in forward compute (the rest: backward)
  double step_seconds = 0;     // in run_stage: from before its first action to after its
                               // last; on the first stage, which runs the step's first
                               // forward and its last backward, the schedule's makespan
  int max_in_flight = 0;     // micro-batches whose activations were held at once
  // The last step's compute seconds per micro-batch (forward + backward of every chunk this
  // stage holds; the backward as around_backward wraps it), indexed by micro-batch.
  std::vector<double> microbatch_seconds;
};

// Runs stage `group.rank()`'s actions of `schedule`. Throws what the collectives throw
// (heft::PeerLost when a neighbour died) and heft::InvalidArgument for a schedule whose
// stage count is not the group's size.
void run_stage(const Schedule& schedule, ProcessGroup& group, const StageFunctions& stage,
               PipelineCounters* counters = nullptr);

}  // namespace heft::parallel::pipeline
