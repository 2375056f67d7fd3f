// ProcessGroup: the communicator's collectives on torch::Tensor (c10d's ProcessGroup, on
// heft's comm::Communicator).
//
// Tensors must be defined, on the CPU, contiguous, and of a dtype the communicator moves:
// float (f32), double (f64), half (f16), bfloat16 (bf16), int (i32), long (i64). Anything
// else throws heft::InvalidArgument naming the operation and what was wrong (the dtype, the
// device, the strides), before anything is sent. Like the communicator, every collective
// must be issued in the same order, with the same sizes, on every rank of the group.
//
// Async forms return a Work that keeps the tensors alive until the operation finished; the
// caller must not read or write them before wait() (or test() returning true). Errors of the
// operation (heft::PeerLost, heft::Timeout) are rethrown by wait(); the sync forms wait.
//
// Point to point (pipeline stages): send, recv and a batched exchange whose sends and
// receives progress together (comm::Communicator::exchange), with tags. The receiving
// tensor has the shape and dtype both sides agreed beforehand; the byte count and tag are
// checked, not the shape.
//
// Deliberately left out: GPU tensors, lists of tensors per call (one tensor per call; DDP
// flattens buckets itself), sparse tensors.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "heft/comm/communicator.h"

namespace heft::parallel {

// The handle of an asynchronous tensor collective. Thread-safe.
class Work {
 public:
  Work(std::shared_ptr<comm::Work> work, std::vector<torch::Tensor> tensors);
  // Blocks until done; rethrows the operation's error. May be called any number of times.
  void wait();
  // True once the operation finished; never blocks or throws.
  bool test();

 private:
  std::shared_ptr<comm::Work> work_;
  const std::vector<torch::Tensor> tensors_;  // kept alive as long as this Work
};

// The communicator dtype of a torch scalar type (the map of torch_dtype.h); throws
// heft::InvalidArgument naming it when the communicator cannot move it.
comm::DataType to_comm_dtype(torch::ScalarType t);

// One send or receive of ProcessGroup::exchange.
struct TensorP2P {
  bool send = true;
  torch::Tensor tensor;  // send: read; recv: written (contiguous, the agreed shape)
  int peer = -1;
  uint32_t tag = 0;
  static TensorP2P to(const torch::Tensor& t, int peer, uint32_t tag = 0) {
    return {true, t, peer, tag};
  }
  static TensorP2P from(const torch::Tensor& t, int peer, uint32_t tag = 0) {
    return {false, t, peer, tag};
  }
};

class ProcessGroup {
 public:
  // Does not own `comm`, which must outlive this group and every Work it returned.
  explicit ProcessGroup(comm::Communicator& comm) : comm_(comm) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  comm::Communicator& communicator() { return comm_; }

  // In place: tensor = op over ranks of tensor. Exact: the communicator's default wire
  // compression (HEFT_COMPRESSION) is not applied to tensors.
  std::shared_ptr<Work> allreduce_async(torch::Tensor& tensor,
                                        comm::ReduceOp op = comm::ReduceOp::sum);
  // In place: tensor on `root` copied to tensor on every rank (same shape and dtype there).
  std::shared_ptr<Work> broadcast_async(torch::Tensor& tensor, int root);
  // output (size() * input.numel() elements, input's dtype, any shape) holds rank j's input
  // in block j.
  std::shared_ptr<Work> allgather_async(const torch::Tensor& input, torch::Tensor& output);
  // input (size() * output.numel() elements): block j is meant for rank j; output gets this
  // rank's block reduced with op over ranks.
  std::shared_ptr<Work> reduce_scatter_async(const torch::Tensor& input, torch::Tensor& output,
                                             comm::ReduceOp op = comm::ReduceOp::sum);
  // Completes once every rank entered it.
  std::shared_ptr<Work> barrier_async();
  // Point to point: see the file comment. A rank never waits for its own sends to be
  // received to start its receives within one exchange.
  std::shared_ptr<Work> exchange_async(const std::vector<TensorP2P>& ops);
  std::shared_ptr<Work> send_async(const torch::Tensor& tensor, int peer, uint32_t tag = 0) {
    return exchange_async({TensorP2P::to(tensor, peer, tag)});
  }
  std::shared_ptr<Work> recv_async(torch::Tensor& tensor, int peer, uint32_t tag = 0) {
    return exchange_async({TensorP2P::from(tensor, peer, tag)});
  }
  void exchange(const std::vector<TensorP2P>& ops) { exchange_async(ops)->wait(); }

  void allreduce(torch::Tensor& tensor, comm::ReduceOp op = comm::ReduceOp::sum) {
    allreduce_async(tensor, op)->wait();
  }
  void broadcast(torch::Tensor& tensor, int root) { broadcast_async(tensor, root)->wait(); }
  void allgather(const torch::Tensor& input, torch::Tensor& output) {
    allgather_async(input, output)->wait();
  }
  // A new tensor of shape (size(), *input.sizes()) with every rank's input.
  torch::Tensor allgather(const torch::Tensor& input);
  // Each value summed over the ranks (in float64): counters, losses, votes.
  std::vector<double> sum(std::vector<double> values);
  void reduce_scatter(const torch::Tensor& input, torch::Tensor& output,
                      comm::ReduceOp op = comm::ReduceOp::sum) {
    reduce_scatter_async(input, output, op)->wait();
  }
  void barrier() { barrier_async()->wait(); }

 private:
  comm::Communicator& comm_;
};

}  // namespace heft::parallel
