// Automatic layout (issue 33): for a model's profiled layers, the communicator's measured
// collective costs, a world and a per-rank memory limit, every layout
//   data (R) x sharded (S) x tensor (T) x pipeline (P) = world
// with its micro-batches (m), virtual stages (v) and activation checkpointing is priced by a
// cost model, those over the memory limit (or otherwise impossible) are dropped with their
// reason, and the rest are ranked by predicted step time. No LibTorch: it runs on the
// partitioner's LayerCost and the schedule simulator (pipeline/partition.h, schedule.h).
//
// The model, per layout (D = R x S replicas of the model; each replica's batch global/D is cut
// into m micro-batches of b = global/(D m) samples):
//  - Compute. A layer's forward/backward time (beyond its per-call part, ModelCost::
//    forward_fixed_s / backward_fixed_s) and activation bytes scale linearly with the samples
//    of a micro-batch (profiled at ModelCost::profiled_batch). Tensor degree T divides
//    a layer's time by T and adds ModelCost::tensor_allreduces_per_layer all-reduces of the
//    smaller of the layer's input and output activation (the hidden state) over T ranks per micro-batch (half in the forward, half in the
//    backward), not overlapped. Checkpointing adds one more forward to every backward.
//  - Pipeline. auto_partition cuts the layers into P x v chunks (SearchOptions::memory_weight);
//    make_schedule("interleaved", P, m, 0, v) (1F1B; Megatron's interleaving for v > 1) is
//    simulated with per-stage action costs = the stage's chunk times / v plus, for a stage that
//    sends, one p2p of the chunk's output activation (not overlapped). The makespan is the
//    compute part of the step, bubble included. P = 1: m forward+backward passes in sequence.
//  - Gradients. G = the largest stage's parameter bytes / T. S = 1, R > 1: one all-reduce of G
//    over R per step. S > 1 (ZeRO-3 style): per micro-batch an all-gather of G over S in the
//    forward and one in the backward, per step one reduce-scatter of G over S, and with R > 1
//    (hybrid) an all-reduce of G/S over R. Not overlapped with compute unless
//    SearchOptions::overlap_gradients, which hides the gradient all-reduce / reduce-scatter
//    behind the last micro-batch's backward, up to its length.
//  - Memory per rank (the largest stage): parameters, gradients and optimizer state of G bytes
//    (each / S when sharded) and, sharded, a gather buffer of two of the stage's largest layers
//    (one in use, one prefetched) and sharded_gradient_copies x G; activations: max in-flight
//    micro-batches (from the simulator; 1 without a pipeline) x the stage's saved bytes per
//    micro-batch / v, where a layer saves ModelCost::saved_bytes (measured) or
//    saved_activation_factor x its output bytes, / T; plus ModelCost::fixed_bytes, and replicated, replica_gradient_copies x G; checkpointed
//    (every layer a checkpoint), a micro-batch keeps only each layer's input (the previous
//    layer's output; the model's own input is not counted) and the backward recomputes one
//    layer at a time (the largest layer's full activations, added once). The last stage adds
//    ModelCost::transient_bytes (scaled, / T) x (1 + transient_retention), once. The backward
//    also holds backward_tensor_copies fresh gradients of the stage's largest parameter
//    tensor (/ T) beside the accumulated ones. After the backward (activations freed) the
//    gradient norm and the optimizer hold step_tensor_copies of it (/ T; sharded: of the
//    largest layer's shard), counted beside the backward's: the allocator keeps the backward's
//    freed blocks, and the step's larger temporaries do not fit their holes.
//    Plus ModelCost::run_bytes, and replica_group_bytes when data x sharded > 1.
//    Every layout needs at least ModelCost::profile_peak_bytes (world rank 0's peak while it
//    profiled) and adds profile_residue_bytes (what rank 0 keeps of it).
//  - Optimizer. ModelCost::optimizer_s x the rank's share of all parameter bytes (G, / S
//    when sharded), added to the compute.
//  - Contention (SearchOptions::host_cores > 0): the compute x max(1, (host_threads x (1 -
//    bubble) + host_load) / host_cores).
//  - Host terms measured on the job's ranks (host_probe.h; neutral by default): the layers'
//    compute x host_compute_inflation and the optimizer's x host_step_inflation (CPU per unit
//    of work with every rank busy over one rank alone), before the contention; each
//    synchronisation point on the step's critical path (tensor all-reduces, p2p, the
//    pipeline's fill and drain, gradient collectives) + host_sync's delay of its group, in
//    wall time; with overlap_needs_idle_cores only the idle share of the cores hides the
//    gradient collective behind the backward.
//  Sharded, each of the largest stage's layers is a collective of its own: the all-gathers
//  and the reduce-scatter pay the latency once a layer.
// Not modelled: allocator fragmentation, overlap of p2p with compute, contention between
// concurrent groups,
// placement of the degrees on hosts (every group's cost comes from the CommTable as given).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heft/parallel/pipeline/partition.h"

namespace heft::parallel::layout {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kP2P };
const char* to_string(Collective c);

// One measured collective on groups of `group` ranks: seconds(bytes) = alpha_s + bytes / beta.
// beta in bytes per second (infinity: free bandwidth). For p2p, group is 2.
struct CollectiveCost {
  Collective collective = Collective::kAllReduce;
  int group = 2;
  double alpha_s = 0;
  double beta_bytes_per_s = 1e9;
};

// The communicator's measured costs. A group of 1 costs nothing. For a group size without its
// own entry the smallest measured group above it is used, else the largest below it.
// A synchronisation point's cost beyond its collective, on groups of `group` ranks
// (SearchOptions::host_sync).
struct SyncDelay {
  int group = 2;
  double seconds = 0;
};
// seconds for `group` (see SearchOptions::host_sync); 0 for a group of 1 or none measured.
double sync_seconds(const std::vector<SyncDelay>& delays, int group);

struct CommTable {
  std::vector<CollectiveCost> entries;
  // Throws heft::InvalidArgument naming comm_table when the collective has no entry.
  double seconds(Collective c, int group, int64_t bytes) const;
};

struct ModelCost {
  std::vector<pipeline::LayerCost> layers;  // profiled at profiled_batch samples
  int profiled_batch = 1;
  double optimizer_bytes_per_param_byte = 2;  // adam(w): 2 (exp_avg, exp_avg_sq); sgd: 0
  double saved_activation_factor = 4;         // bytes a layer saves for backward per output byte
  int tensor_allreduces_per_layer = 2;        // Megatron's transformer block: 4
  int heads = 0;                              // > 0: the tensor degree must divide it
  // Per layer, at profiled_batch: the bytes its forward keeps for the backward (measured);
  // empty: saved_activation_factor x its output bytes.
  std::vector<int64_t> saved_bytes;
  // Per rank whatever the layout: the runtime's own memory (LibTorch, communicator buffers).
  int64_t fixed_bytes = 0;
  // Replicated (sharded 1, data > 1): flat copies of the stage's gradients the all-reduce
  // keeps (DDP's buckets): this many x the stage's parameter bytes more state.
  double replica_gradient_copies = 0;
  // Sharded (S > 1): full-size gradients the backward holds before their reduce-scatters,
  // as copies of the stage's parameter bytes (heft-train's ZeRO-3: 1, measured).
  double sharded_gradient_copies = 0;
  // Per layer, the part of forward_s / backward_s a call pays whatever its samples (a fit of
  // two profiles); the rest scales with the samples. Empty: all of it scales.
  std::vector<double> forward_fixed_s, backward_fixed_s;
  // One optimizer step over every layer's parameters (seconds): a rank's step costs the
  // share of its parameters (the largest stage's / T, / S when sharded).
  double optimizer_s = 0;
  // At profiled_batch: what a whole step holds at its peak beyond the state and the saved
  // bytes above (the loss's buffers, the backward's temporaries): on the last stage, scaled
  // with a micro-batch's samples / T, once.
  int64_t transient_bytes = 0;
  // The allocator keeps freed transient blocks resident and reuses them unevenly: a run's peak
  // RSS holds this many more copies of the scaled transient bytes (measured; heft-train's in
  // docs/auto-layout.md).
  double transient_retention = 0;
  // Per layer: its largest parameter tensor's bytes (the embedding's or head's matrix);
  // empty: the layer's param_bytes.
  std::vector<int64_t> largest_tensor_bytes;
  // At profiled_batch, measured (model_measure.h's step probe; 0: not measured): the resident
  // bytes three whole training steps of one process added at their peak. What it exceeds the
  // model's own count of such a step by (saved activations, gradients, optimizer state, the
  // loss's transient, the backward's and the step's temporaries) is the allocator's slack: freed blocks it keeps resident and the fragments
  // between them; priced as a share of each layout's activations (MemoryPart
  // "allocator_slack").
  int64_t step_peak_bytes = 0;
  // The backward's fresh gradient of a parameter before it is added into the accumulated one
  // (autograd's AccumulateGrad): this many copies of the stage's largest tensor (/ T) at once.
  double backward_tensor_copies = 0;
  // After the backward: the gradient norm's and the optimizer's temporaries, as copies of the
  // stage's largest tensor (/ T; sharded: of its largest layer / S, a flat shard). heft-train:
  // 4 with grad_clip (each gradient in double, and its square) + AdamW's 2 (sqrt, quotient).
  double step_tensor_copies = 0;
  // World rank 0 profiles before the run: its peak resident bytes then (every layout needs at
  // least this), and the resident bytes beyond fixed_bytes it still holds after (added to
  // every layout: conservative for the ranks that did not profile).
  int64_t profile_peak_bytes = 0;
  int64_t profile_residue_bytes = 0;
  // A training run's resident bytes beyond fixed_bytes that no term above holds, measured:
  // every layout's (the kernels' code pages a step first touches, the allocator's blocks),
  // and a replicated or sharded layout's (data x sharded > 1: its gradient collectives'
  // buffers and blocks).
  int64_t run_bytes = 0;
  int64_t replica_group_bytes = 0;
};

struct SearchOptions {
  int world = 1;
  int64_t memory_limit_bytes = 0;  // per rank
  int global_batch = 1;            // samples per step, all replicas together
  std::vector<int> microbatches = {1, 2, 4, 8, 16, 32};
  std::vector<int> virtual_stages = {1, 2};  // v > 1 only with P > 1
  std::vector<bool> checkpointing = {false, true};
  double memory_weight = 0.2;  // the partitioner's (optimize: speed)
  bool overlap_gradients = false;
  // > 0: the tensor degree must divide it (the degrees the model's tensor plan can split it
  // into; 1: the model has none, so tensor 1 only). 0: any (heft-train's GPT: ModelCost::heads).
  int tensor_splits = 0;
  // host_cores > 0: the layers' and optimizer's times are of one rank alone, and a layout's
  // compute is x max(1, (host_threads x (1 - bubble) + host_load) / host_cores): the host's
  // ranks x threads busy (a pipeline's idle share frees cores) and its other runnable load.
  double host_cores = 0;
  double host_threads = 0;
  double host_load = 0;
  // Measured on the job's ranks as it starts (host_probe.h); the defaults add nothing.
  // A unit of work's CPU seconds with every rank busy over rank 0's alone: the layers' compute
  // (host_compute_inflation) and the optimizer's step with the gradient norm, memory-bound
  // (host_step_inflation), are x these (before the contention).
  double host_compute_inflation = 1;
  double host_step_inflation = 1;
  // Wall seconds a synchronisation point of a group costs beyond its collective's CommTable
  // price (a peer descheduled, a woken rank waiting for a core), per group size (the entry
  // for the group, else the smallest above, else the largest below; none: 0). Counted on a
  // step's critical path: each tensor all-reduce of a stage's layers per micro-batch (on the
  // tensor group), each p2p a stage waits on per micro-batch (2 per neighbour: the
  // activation and its gradient, on pairs), the pipeline's fill and drain (2 (P - 1)), each
  // gradient collective (a DDP all-reduce per bucket of the stage's gradients; sharded,
  // per layer: 2 all-gathers a micro-batch and a reduce-scatter; hybrid, the shard's
  // all-reduce) on its group. Not multiplied by the contention: measured in wall time.
  std::vector<SyncDelay> host_sync;
  // DDP's gradient buckets (heft-train's defaults): the first holds first_bucket_bytes, each
  // later one bucket_bytes.
  int64_t bucket_bytes = int64_t{25} << 20;
  int64_t first_bucket_bytes = int64_t{1} << 20;
  // With host_cores > 0, only the idle share of the cores, max(0, 1 - (host_threads x (1 -
  // bubble) + host_load) / host_cores), runs the gradient collective beside the backward:
  // overlap_gradients hides that share of it (all when the host has idle cores to spare;
  // none when the ranks fill them, the collective's copies then take the compute's cores).
  bool overlap_needs_idle_cores = false;
};

struct Layout {
  int data = 1, sharded = 1, tensor = 1, pipeline = 1;
  int microbatches = 1, virtual_stages = 1;
  bool checkpointing = false;
  std::string checkpoint_placement = "cluster";
};
std::string to_string(const Layout& l);  // "data 2 x sharded 1 x tensor 1 x pipeline 2, m 4, v 1, ckpt off"

// One component of a rank's predicted peak memory (Prediction::memory_parts).
struct MemoryPart {
  std::string name;  // "parameters", "gradients", "optimizer_state", ...
  int64_t bytes = 0;
};

struct Prediction {
  Layout layout;
  double step_s = 0;
  double compute_s = 0;      // makespan of the pipeline (bubble included) or m passes
  double bubble = 0;         // the simulator's idle share (0 without a pipeline)
  double tensor_comm_s = 0;  // per step
  double gradient_comm_s = 0;
  double sync_s = 0;         // of which (tensor comm, gradient comm, pipeline) synchronisation delays
  int64_t memory_bytes = 0;  // per rank, the largest stage
  // The same for a rank that did not profile (every rank of a run given its layout; ranks > 0
  // of an automatic one): memory_bytes without rank 0's profile residue and floor.
  int64_t unprofiled_memory_bytes = 0;
  int64_t state_bytes = 0;   // of which parameters + gradients + optimizer + gather buffers
  int64_t activation_bytes = 0;  // the backward's: saved activations, transient, fresh gradients
  int64_t step_bytes = 0;        // after the backward: the gradient norm's and the optimizer's
  int max_in_flight = 1;
  std::vector<int> stage_first;  // the partitioner's first layer of each of P x v chunks
  // memory_bytes by component, of the same stage, summing to it exactly: parameters,
  // gradients, optimizer_state (the rank's share of each: 1/S when sharded), gradient_buffers
  // (DDP's bucket copies; sharded: the full-size gradients before their reduce-scatters and
  // the replicas' buffer), gathered_parameters (sharded: two layers gathered), activations
  // (saved for the backward, m in flight; checkpointed: the stage inputs and one chunk's),
  // loss_transient (the loss's buffers, with what the allocator keeps of them),
  // backward_temporaries, step_temporaries (the norm's and the optimizer's), runtime (LibTorch,
  // the communicator, what profiling left), allocator_slack (ModelCost::step_peak_bytes) and
  // profile_floor (what the measured profile's own peak exceeds the rest by; usually 0).
  std::vector<MemoryPart> memory_parts;
};

struct Dropped {
  Layout layout;
  std::string reason;  // "memory 7.2 GB > limit 4.0 GB", "tensor 4 does not divide heads 6", ...
  int64_t memory_bytes = 0;  // when the memory was computed (> 0), else 0
};

struct SearchResult {
  std::vector<Prediction> ranked;  // feasible, fastest first
  std::vector<Dropped> dropped;    // in enumeration order
};

// Prices one layout (no limit check). Throws heft::InvalidArgument naming the field when the
// layout is impossible for these inputs (the reason search() records).
Prediction evaluate(const ModelCost& model, const CommTable& comm, const SearchOptions& options,
                    const Layout& layout);

// Every layout in enumeration order (data descending; then sharded, tensor, m, v ascending as
// options list them, checkpointing off first; the pipeline degree is what remains), ranked by
// step_s, ties by that order (the simpler layout: the most data replicas, the least sharding,
// tensor, micro-batches and chunks): deterministic, the same inputs give the same ranking on
// every rank. Dropped: what evaluate() rejects (its message) and what exceeds the limit. Throws heft::InvalidArgument naming world, memory_limit,
// global_batch or layers for bad options, and naming memory_limit with the smallest memory any
// layout needs (and that layout) when none fits.
SearchResult search(const ModelCost& model, const CommTable& comm, const SearchOptions& options);

// The ranked table (top `top`) and the dropped layouts with their reasons (the first
// `dropped` of them and how many more; < 0: all).
std::string describe(const SearchResult& result, int top = 10, int dropped = -1);

std::string format_bytes(int64_t bytes);  // "7.2 GB" (10^9), "512.0 MB", "3.0 kB", "12 B"

}  // namespace heft::parallel::layout
