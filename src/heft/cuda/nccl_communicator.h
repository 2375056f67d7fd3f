// heft's NCCL communicator: collectives on CUDA memory for a group whose ranks each have a GPU
// of their own (nccl_dispatch.h decides when; docs/gpu.md). The rendezvous is heft's own
// authenticated store: rank 0 makes NCCL's unique id and publishes it there, so only a rank
// holding the job's token joins. Never waits forever: the communicator is created
// non-blocking and polled until the deadline, and wait() polls the stream and NCCL's
// asynchronous error, aborting the communicator when the deadline passes or a peer fails.
// One GPU runs world size 1 only (NCCL refuses two ranks on one GPU); the rest is on paper
// until a machine with several GPUs runs it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>

#include "heft/comm/dtype.h"
#include "heft/comm/store/store.h"

namespace heft::cuda {

class NcclCommunicator {
 public:
  // Collective over the group `prefix` of `store`: every rank calls it with its rank, the
  // group's size and its device (an ordinal after CUDA_VISIBLE_DEVICES). Throws
  // heft::InvalidArgument for a bad rank, size or device (a machine without a GPU: naming
  // the CUDA runtime's reason), heft::Timeout when the group has not formed by `timeout`,
  // heft::Error carrying NCCL's message otherwise.
  static std::unique_ptr<NcclCommunicator> create(comm::Store& store, const std::string& prefix,
                                                  int rank, int size, int device,
                                                  std::chrono::milliseconds timeout);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Enqueued on `stream`; the buffers are device memory of this communicator's device.
  // InvalidArgument for a type or operator NCCL lacks (choose_call_path routes those to
  // staging before they get here).
  void allreduce(void* data, size_t count, comm::DataType t, comm::ReduceOp op, cudaStream_t stream);
  void broadcast(void* data, size_t count, comm::DataType t, int root, cudaStream_t stream);
  void all_gather(const void* in, void* out, size_t count_per_rank, comm::DataType t,
                  cudaStream_t stream);
  void reduce_scatter(const void* in, void* out, size_t count_per_rank, comm::DataType t,
                      comm::ReduceOp op, cudaStream_t stream);
  void send(const void* data, size_t count, comm::DataType t, int peer, cudaStream_t stream);
  void recv(void* data, size_t count, comm::DataType t, int peer, cudaStream_t stream);

  // Until `stream`'s work is done: heft::Timeout after `timeout` (the communicator aborted),
  // heft::Error when NCCL reports an asynchronous error (a peer lost).
  void wait(cudaStream_t stream, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }

 private:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  // Returns once a non-blocking call's ncclInProgress has settled; throws for an error.
  void settle(ncclResult_t r, const char* op);
  [[noreturn]] void fail(const std::string& op, ncclResult_t r);

  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1, device_ = 0;
  bool aborted_ = false;
};

}  // namespace heft::cuda
