// DistributedDataParallel: data-parallel training of a torch::nn::Module over a
// ProcessGroup, with gradient communication overlapped with backward.
//
// Every rank holds a full replica of the module and runs forward and backward on its own
// share of the global batch. DDP keeps the replicas identical:
//  - construction broadcasts every parameter and buffer from rank 0 (and checks that every
//    rank registered the same parameters, else heft::InvalidArgument);
//  - the parameters that require grad are grouped into buckets, in reverse registration
//    order (the order backward produces their gradients): a bucket is closed once it holds
//    at least `bucket_bytes` of gradients (`first_bucket_bytes` for the first, so that
//    communication starts early);
//  - a post hook on each parameter's gradient accumulator copies the gradient into its
//    bucket's flat buffer as soon as autograd has accumulated it; when every gradient of a
//    bucket is in, the bucket's asynchronous allreduce (average) is launched while backward
//    goes on computing the earlier layers. Buckets are launched in index order on every
//    rank (a bucket that fills early waits for the ones before it), so every rank issues
//    the same collectives in the same order;
//  - at the end of backward (an autograd engine callback, so it cannot be forgotten) DDP
//    waits for every bucket and hands the averaged gradients back: each param.grad()
//    becomes an alias of its bucket's memory (with the parameter's strides; not an
//    autograd view, so zero_grad() may detach it), so nothing is copied out; with bf16
//    compression they are converted into param.grad() instead. When backward() returns,
//    the gradients are the mean over ranks of the local ones: call the optimizer's step()
//    directly. Zeroing grads in place (optimizer.zero_grad()) zeroes the bucket and the
//    next backward accumulates straight into it; resetting them to undefined is as good
//    (and saves the fill).
//
// For the result to equal one process on the global batch, each rank's loss must be the
// mean over its local samples and every rank must hold the same number of samples (or
// weight its loss by local/global sample counts times the world size; DistributedSampler
// and heft-train do that for the last partial batch).
//
// Gradient accumulation: while a NoSync guard from no_sync() lives, backward only
// accumulates into param.grad() locally; the first backward after it ends reduces the
// accumulated gradients. Averages are linear, so accumulating k micro-batches of size b
// under no_sync and reducing on the last equals one step on k*b samples per rank when each
// micro-batch loss is divided by k.
//
// Unused parameters: a parameter whose gradient never arrives in a backward pass blocks its
// bucket. By default the end of backward then throws heft::InvalidArgument naming every such
// parameter (on each rank that missed it). With find_unused_parameters the missing ones are
// reduced with their current param.grad() (zeros when undefined) instead, so a parameter
// used on some ranks only gets the average of the ranks' gradients, and afterwards every
// parameter has a defined grad.
//
// bf16_compression: buckets of floating gradients travel as bfloat16 (half the bytes) and
// are averaged in bfloat16 (the communicator sums in f32 and rounds once per step). This is
// lossy: about 3 significant decimal digits per gradient element, so results drift from the
// uncompressed path by ~1e-2 relative; use it where bandwidth, not compute, bounds a step.
//
// Threading: one backward at a time per DDP object, as in PyTorch; the hooks run on the
// autograd thread that runs backward. Errors of a collective (heft::PeerLost,
// heft::Timeout) are rethrown from backward(); the communicator is broken after them, so
// training cannot go on. A backward pass that fails for another reason before its end
// (an exception in some autograd node) leaves DDP's pass unfinished: the next backward then
// throws heft::InvalidArgument (and cleans up), the one after works again. The module, the
// group and its communicator must outlive this object; the destructor removes the hooks.
// Not copyable or movable.
//
// Deliberately left out: wrapping forward (C++ modules have no common forward signature;
// call module's forward yourself), rebroadcasting buffers every iteration (call
// broadcast_state()), bucket rebuilding by observed order, sparse gradients, GPUs.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "heft/parallel/grad_buffer.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel::data {

struct DistributedDataParallelOptions {
  // Gradient bytes per bucket. Larger: fewer, more efficient collectives; smaller: more of
  // the communication hides behind backward. 25 MiB, as PyTorch.
  size_t bucket_bytes = 25u << 20;
  // Cap of the first bucket (the last layers' gradients, ready first). Small so the first
  // allreduce starts early in backward. 1 MiB, as PyTorch.
  size_t first_bucket_bytes = 1u << 20;
  // Tolerate parameters that get no gradient in a backward pass (see the file comment).
  bool find_unused_parameters = false;
  // Reduce floating gradients as bfloat16 (lossy, see the file comment).
  bool bf16_compression = false;
};

// What one bucket holds, for logs and tests.
struct BucketInfo {
  std::vector<std::string> parameters;  // names, in the bucket's (reverse registration) order
  int64_t numel = 0;                    // gradient elements
  size_t bytes = 0;                     // bytes on the wire (bf16 when compressed)
};

// When things happened during the last synchronised backward pass (steady clock). Used to
// show that communication overlaps backward.
struct BackwardTimeline {
  using TimePoint = std::chrono::steady_clock::time_point;
  TimePoint first_gradient;                // the first gradient hook of the pass
  TimePoint last_gradient;                 // the last gradient hook (backward's compute is over)
  std::vector<TimePoint> bucket_launched;  // per bucket: its allreduce was issued
  // Per bucket: whether its allreduce was seen finished by a gradient hook, i.e. while
  // backward was still computing.
  std::vector<bool> bucket_done_during_backward;
  TimePoint finished;  // every bucket reduced and written back
};

class DistributedDataParallel {
 public:
  // Broadcasts module's parameters and buffers from rank 0 (collective: every rank of
  // `group` constructs its DDP at the same point), builds the buckets and registers the
  // hooks. Throws heft::InvalidArgument if the ranks' parameters differ in count, shapes or
  // dtypes, or a parameter is not a dense CPU tensor of a supported dtype.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, ProcessGroup& group,
                          DistributedDataParallelOptions options = {});
  // Convenience for module holders: DistributedDataParallel ddp(Net(), group).
  template <typename M>
  DistributedDataParallel(const torch::nn::ModuleHolder<M>& module, ProcessGroup& group,
                          DistributedDataParallelOptions options = {})
      : DistributedDataParallel(std::static_pointer_cast<torch::nn::Module>(module.ptr()), group,
                                options) {}
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module() { return *module_; }
  const std::shared_ptr<torch::nn::Module>& module_ptr() const { return module_; }
  ProcessGroup& group() { return group_; }
  const DistributedDataParallelOptions& options() const { return options_; }

  // RAII: while alive, backward passes accumulate gradients locally without communicating.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  // for (micro-batches but the last) { auto guard = ddp.no_sync(); loss.backward(); }
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  // Whether the next backward reduces gradients (false inside no_sync()).
  bool sync_enabled() const { return sync_enabled_; }

  // Broadcasts every parameter and buffer from rank 0 (done by the constructor; call again
  // after loading a checkpoint on rank 0 only). Collective; not during backward.
  void broadcast_state();

  const std::vector<BucketInfo>& buckets() const { return bucket_info_; }
  // The last synchronised backward pass; empty before the first.
  const BackwardTimeline& last_timeline() const { return timeline_; }

 private:
  struct Slot {
    torch::Tensor param;
    std::string name;
    int bucket = 0;
    int64_t offset = 0;                                  // in the bucket's flat buffer, elements
    GradientHookHandle hook;                             // on its gradient accumulator
  };
  struct Bucket {
    std::vector<int> slots;
    torch::Tensor flat;  // (numel,) in the wire dtype
    int pending = 0;     // gradients not yet copied in this pass
    std::shared_ptr<Work> work;
  };

  void check_same_parameters();
  void build_buckets();
  void register_hooks();
  // The hook: slot's gradient has been accumulated into its param.grad().
  void on_gradient(int slot);
  // Starts every bucket from next_bucket_ on that has all its gradients, in order.
  void launch_ready_buckets();
  void launch(int bucket);
  // End of backward (engine callback): reduce what is left, wait, write back.
  void finish_backward();
  void fill_missing_or_throw();
  // Waits for the buckets in flight and forgets the pass (after an error in a hook).
  void abandon_pass();
  // Slot s's gradient area in its bucket's flat buffer, shaped (and strided) as the param.
  torch::Tensor bucket_view(const Slot& s);

  std::shared_ptr<torch::nn::Module> module_;
  ProcessGroup& group_;
  const DistributedDataParallelOptions options_;
  std::vector<Slot> slots_;  // reverse registration order
  std::vector<Bucket> buckets_;
  std::vector<BucketInfo> bucket_info_;
  bool sync_enabled_ = true;
  // State of the backward pass in progress (touched only by the autograd thread).
  bool in_pass_ = false;
  std::vector<char> ready_;  // per slot
  int next_bucket_ = 0;      // the next bucket to launch
  BackwardTimeline timeline_;
};

}  // namespace heft::parallel::data
