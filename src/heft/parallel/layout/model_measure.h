// The model's side of the layout search, measured once for every caller: heft-train's GPT
// (train/auto_layout.cc) and a user's PyTorch layers (heft.torch.parallel.auto_layout, through
// _c10d.parallel.layout.measure_layers) hand their layers over as callables and get the same
// figures, measured the same way:
//  - each layer's forward and backward CPU seconds (parallel/pipeline's profile_layers: warm-up
//    rounds, then the median), its output's bytes, its parameters' bytes and largest tensor;
//  - again at a larger batch, for the part of each time paid per call (t(b) = fixed +
//    per_sample b, fitted through the two);
//  - the heap each layer's forward keeps alive until its backward (malloc's bytes in use, its
//    output included), each layer reading the previous one's output;
//  - the head's transient bytes (the loss's buffers and the output's gradient beyond the head's
//    saved bytes) and the loss's seconds;
//  - the optimizer's step (measure_step), on copies shaped as the largest layer's parameters.
// One layer's gradients exist at a time; a caller may free each layer once it is measured
// (heft-train does: its profile then never holds the whole model's gradients).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "heft/parallel/pipeline/partition.h"

namespace heft::parallel::layout {

// Bytes malloc has handed out and not taken back (heap and mmap'd blocks: mallinfo2).
int64_t heap_in_use();
// This process's CPU seconds (CLOCK_PROCESS_CPUTIME_ID): the profile's clock; the host's
// contention is priced apart (host_probe.h).
double cpu_seconds();
// This process's peak resident bytes so far (getrusage's ru_maxrss).
int64_t peak_resident_bytes();

// The model as the measurement sees it.
struct MeasuredModel {
  int layers = 0;
  // Layer i on x with autograd on: its output.
  std::function<torch::Tensor(int i, const torch::Tensor& x)> forward;
  // Layer i's parameters (their gradients are reset once the layer is measured).
  std::function<std::vector<torch::Tensor>(int i)> parameters;
  // The head's output -> the loss (its seconds count on the head's forward; its buffers in
  // the transient bytes); empty: the output's gradient only.
  std::function<torch::Tensor(const torch::Tensor& head_output)> loss;
  // Called once layer i (never the last: the loss needs the head) is measured, its input for
  // the next layer taken: heft-train empties its parameters there. May be empty.
  std::function<void(int i)> measured;
  // Whether the first layer's input gradient is computed (and timed), as in a step where the
  // batch requires grad; a floating batch's later layers always compute it.
  bool input_requires_grad = false;
  // The step probe's optimizer (LayerMeasureOptions::step_probe): made over every layer's
  // parameters, its step() called after each backward. May be empty (no optimizer step).
  std::function<std::function<void()>(std::vector<torch::Tensor>&)> make_step;
};

struct LayerMeasureOptions {
  parallel::pipeline::ProfileOptions profile{1, 5};  // per layer and batch
  // When the caller frees memory between layers: malloc's free blocks given back to the
  // system (malloc_trim) after each layer, so the profile's peak is its largest layer's.
  bool trim = true;
  // After the layers: three whole training steps of the chain (every layer's forward with the
  // previous step's gradients still held, as a loop that clears them before the backward
  // has them; the loss or the output's gradient; the backward; MeasuredModel::make_step's
  // step), the resident set's peak over its size before them (LayerMeasurement::
  // step_peak_bytes): what the allocator really holds at a step's peak, beyond the heap the
  // layers keep, and what it carries from one step into the next. The parameters are put
  // back afterwards (a copy is kept meanwhile) and the optimizer dropped. Needs every layer
  // alive at once (not for a caller that frees layers in `measured`).
  bool step_probe = false;
};

// Per layer, what measure_layers finds, and the head's terms.
struct LayerMeasurement {
  std::vector<parallel::pipeline::LayerCost> costs;  // at the batch's samples; names left empty
  std::vector<double> forward_fixed_s, backward_fixed_s;  // the per-call parts (0 without a larger batch)
  std::vector<int64_t> saved_bytes, largest_tensor_bytes;
  std::vector<std::vector<std::vector<int64_t>>> shapes;  // each layer's parameters'
  int64_t transient_bytes = 0;  // the head's (see above)
  double loss_s = 0;            // the loss's forward, twice for its backward (already in the head's forward_s)
  // With LayerMeasureOptions::step_probe: the peak resident bytes three whole steps added over
  // the resident set before them (activations, the gradients, the optimizer's state and
  // temporaries, the loss's buffers and what the allocator keeps); 0 without the probe or where
  // the peak cannot be reset (host.h).
  int64_t step_peak_bytes = 0;
};

// Measures `model` on `batch` (the first layer's input) and, when `larger` is defined (the same
// input at more samples: larger_samples of them against batch_samples), the per-call parts.
// Each floating input is cloned before a layer reads it (a layer that works in place may write
// it). heft::InvalidArgument naming the field when the model has no layers or a callable is
// missing; what a layer throws passes through.
LayerMeasurement measure_layers(const MeasuredModel& model, const torch::Tensor& batch,
                                int64_t batch_samples, const torch::Tensor& larger, int64_t larger_samples,
                                const LayerMeasureOptions& options = {});

// The optimizer's probe: at most this many bytes of float32 parameters (its time per byte is
// what counts; a larger probe only raises the profile's peak by its gradients, state and
// temporaries).
constexpr int64_t kStepProbeBytes = int64_t{8} << 20;

// The probe's tensor sizes (elements): the largest layer's parameter shapes, its first tensors
// within kStepProbeBytes, or one tensor of kStepProbeBytes when its first tensor alone is
// larger; *probe_bytes their bytes, *all_bytes every layer's parameter bytes.
std::vector<std::vector<int64_t>> step_probe_shapes(const LayerMeasurement& m, int64_t* probe_bytes,
                                                   int64_t* all_bytes);

// One optimizer step's CPU seconds over every layer's parameters: make_step(probe) (probe:
// float32 tensors of step_probe_shapes, requiring grad, their gradients zero) returns the step
// (the optimizer's, a clip's scaling with it where the run clips); it runs 5 times and the
// median of the last 3 (the first pay the state's first touch and fresh pages) is scaled by
// all parameter bytes / the probe's. 0 when the model has no parameters.
double measure_step(const LayerMeasurement& m,
                    const std::function<std::function<void()>(std::vector<torch::Tensor>&)>& make_step);

}  // namespace heft::parallel::layout
