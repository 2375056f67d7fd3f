// heft.torch._c10d's backend: the torch.distributed backend "heft" (a torch 2 c10d::Backend,
// which torch's ProcessGroup wraps for the CPU device) over heft's Communicator. The one
// place that knows c10d's Backend API; backend_of() below is the one place that finds it
// behind torch's ProcessGroup. Its store adapters are in store_adapter.h, the tensor
// staging in staging.h, the Python module in module.cc.
//
// Each operation stages its tensors (staging.h) and returns a Work over a
// c10::ivalue::Future; the communicator's call is not issued yet but held as the group's
// deferred operation, until the first of: the Work's wait() (a synchronous call such as
// dist.all_reduce(async_op=False) or a barrier), which runs it with the communicator's
// blocking form on the caller's thread (inline when the communicator is idle, as heft's C++
// blocking calls run; the GIL released), copies the results back and completes it there:
// no thread hand-off at all, and no allocation in this backend for an all_reduce (its
// operation is reused, its future made only if someone asks for one: operation.h); getFuture(), isCompleted() and the like (DDP and comm
// hooks take the future at once), the next operation of the group (issue order is kept),
// shut_down(), or the completion thread's tick (an operation held over a full tick, after
// 2-4 ms, is issued: a Work nobody waits on still progresses). Those issue the `_async`
// form. An operation held until the next operation (or the tick) shows a caller that goes
// on without waiting (async_op=True, waited later): the group's next 64 (8) operations are
// then issued at once, not held, so their communication overlaps the caller's work. A future taken by C++ without the GIL (DDP's reducer) is completed by the
// communicator's thread as the operation finishes: no hand-off before DDP's wait returns
// (HEFT_TORCH_DIRECT_FUTURES=0 turns it off, for comparison). Any other operation that
// finishes with no waiter is handed to one completion thread per group, which completes it
// there, so Python comm hooks (then(), which take the GIL) run off the communicator's
// thread; a caller already blocked in wait() completes its own.
// A failed operation (a lost peer, the timeout) sets the future's error: wait() raises a
// RuntimeError naming the lost rank. As for any c10d group, every rank issues the same
// collectives in the same order; bad arguments throw c10::Error naming the operation before
// anything is sent.
//
// Reduce ops: SUM, AVG, PRODUCT, MIN, MAX, and BAND, BOR, BXOR on integer and bool tensors
// (staging.h); dtypes: float32, float64, float16, bfloat16, int8, uint8, int16, int32, int64,
// bool.
//
// Coalescing (torch's _coalescing_manager, the coalesced gathers and reductions): between
// startCoalescing() and endCoalescing() each operation goes as any other (in issue order);
// endCoalescing() returns one Work over them all, whose wait() waits for each.
//
// Deliberately left out: GPU tensors (NCCL's domain), PREMUL_SUM, recv from any source
// (each fails naming itself).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "heft/comm/communicator.h"

namespace heft::torch_backend {

struct Operation;    // one operation (operation.h)
struct Completions;  // which completer completed a group's operations
struct Deferred;     // the operation not issued yet, shared with the group's Works

class ProcessGroupHeft : public c10d::Backend {
 public:
  // Joins the group's ranks through `store` (blocks until all of them did, or `timeout`).
  // The links' token: HEFT_TOKEN under heft run, else one rank 0 publishes in `store`;
  // tuning variables (HEFT_HOST, HEFT_TRANSPORT, ...) as for any heft worker.
  ProcessGroupHeft(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  // Finishes the queued operations, then stops the completion thread (shut_down()).
  ~ProcessGroupHeft() override;

  // Finishes the queued operations and stops the completion thread; releases the GIL while
  // it waits when called with it. Idempotent; the group takes no operation after it.
  void shut_down();
  // shut_down() for every live group: the module registers it with Python's atexit, so a
  // script that exits without destroy_process_group() stops the group's threads while
  // Python still runs (a thread that takes the GIL during finalization is unwound by
  // CPython through noexcept frames: "terminate called without an active exception").
  // Returns how many groups it shut down.
  static int shut_down_all();

  const std::string getBackendName() const override { return "heft"; }
  // torch's destroy_process_group(): shut_down(). abort() the same (nothing waits on a peer
  // longer than the group's timeout).
  void shutdown() override { shut_down(); }
  void abort() override { shut_down(); }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  comm::Communicator& communicator() { return *live_comm(); }
  // Operations issued through this group (for tests: the heft path ran).
  int64_t operations() const { return operations_.load(); }
  // Operations completed: by a caller in wait(); by the completion thread; of the first,
  // those the caller ran itself (the communicator's blocking form ran them on the caller's
  // thread, inline); by the communicator's thread (futures taken by C++); and operations
  // issued at once instead of held (after one whose caller did not wait).
  std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> completions() const;
  // Operations reused instead of allocated (for tests: the allocation-free path ran).
  int64_t reused_operations() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions&) override;
  // gather and scatter go point to point: only the root talks to each rank.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override;

 private:
  // An operation's call on the communicator: its blocking form (blocking true: runs it,
  // returns null) or its `_async` form (returns its Work). Captures what the call reads.
  using Issue = std::function<std::shared_ptr<comm::Work>(comm::Communicator&, bool blocking)>;
  // The Work of an operation, deferred (see the file comment) after issuing the one deferred
  // before it. `finish` runs after the call finished and must own (capture) every staged
  // buffer it reads or writes: a buffer freed earlier is reused while the communicator still
  // uses it.
  c10::intrusive_ptr<c10d::Work> submit(c10d::OpType type, Issue issue,
                                        std::function<void()> finish,
                                        std::vector<at::Tensor> outputs);
  // The same for an operation already filled in (issue, finish, outputs).
  c10::intrusive_ptr<c10d::Work> submit_operation(c10d::OpType type, std::shared_ptr<Operation> op);
  // Issues `op` with the `_async` form; its end hands it to the completion thread.
  void issue_async(const std::shared_ptr<Operation>& op);
  // The communicator; a RuntimeError after shut_down().
  comm::Communicator* live_comm() const {
    TORCH_CHECK(comm_, "heft process group: used after it was shut down (at exit or destroyed)");
    return comm_.get();
  }
  // The completion thread's loop (see the file comment) and its tick.
  void complete_loop();
  void look_at_deferred(uint64_t& seen, int& idle_ticks);

  std::shared_ptr<comm::Store> store_;
  std::unique_ptr<comm::Communicator> comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Operation>> pending_;  // guarded by mu_
  // Completed by a waiter, to be dropped on the completion thread; guarded by mu_.
  std::vector<std::shared_ptr<Operation>> retired_;
  static constexpr size_t kRetiredBatch = 64;
  bool stopping_ = false;  // guarded by mu_
  std::atomic<int64_t> operations_{0};
  std::shared_ptr<Completions> completions_;
  std::shared_ptr<Deferred> deferred_;
  // The completion thread checks the deferred operation. Written under deferred_->mu and
  // mu_, so either lock suffices to read it (submit reads it under deferred_->mu only).
  std::atomic<bool> ticking_{false};
  std::thread thread_;
  std::mutex shut_down_mu_;  // serializes shut_down()
  bool shut_down_ = false;   // guarded by shut_down_mu_
  // Between startCoalescing() and endCoalescing(): the Works of the held operations (only
  // the caller's thread touches them, as torch's coalescing manager is per thread and group).
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
};

// heft's backend behind torch's ProcessGroup `group` (what dist.new_group and the default
// group are on torch 2): its CPU backend. Throws c10::Error naming the backend found when
// it is not heft's.
c10::intrusive_ptr<ProcessGroupHeft> backend_of(const c10::intrusive_ptr<c10d::ProcessGroup>& group);

}  // namespace heft::torch_backend
