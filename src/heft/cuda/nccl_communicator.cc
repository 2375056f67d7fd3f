#include "heft/cuda/nccl_communicator.h"

#include <cstring>
#include <thread>

#include "heft/cuda/nccl_dispatch.h"
#include "heft/error.h"

namespace heft::cuda {

namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string m = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) m += std::string(": ") + last;
  return m;
}

ncclDataType_t type_of(comm::DataType t, const char* op) {
  const auto n = nccl_type(t);
  if (!n) throw InvalidArgument(std::string("nccl ") + op + ": NCCL has no type " + comm::name(t));
  return *n;
}

ncclRedOp_t op_of(comm::ReduceOp o, const char* op) {
  const auto n = nccl_op(o);
  if (!n) throw InvalidArgument(std::string("nccl ") + op + ": NCCL has no operator " + comm::name(o));
  return *n;
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(comm::Store& store,
                                                           const std::string& prefix, int rank,
                                                           int size, int device,
                                                           std::chrono::milliseconds timeout) {
  const std::string who = "rank " + std::to_string(rank) + ": nccl " + prefix;
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument(who + ": rank " + std::to_string(rank) + " of " + std::to_string(size));
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
    cudaGetLastError();
    throw InvalidArgument(who + ": no GPU (" + cudaGetErrorString(e) + ")");
  }
  if (device < 0 || device >= devices)
    throw InvalidArgument(who + ": device " + std::to_string(device) + ", this process sees " +
                          std::to_string(devices));
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    throw Error(who + ": cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e));
  const std::string key = prefix + "/nccl-id";
  ncclUniqueId id;
  if (rank == 0) {
    if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
      throw Error(who + ": ncclGetUniqueId: " + ncclGetErrorString(r));
    store.set(key, comm::Bytes(reinterpret_cast<const uint8_t*>(&id),
                               reinterpret_cast<const uint8_t*>(&id) + sizeof id));
  } else {
    const comm::Bytes b = store.get(key, timeout);  // Timeout names the key
    if (b.size() != sizeof id)
      throw Error(who + ": the published NCCL id has " + std::to_string(b.size()) +
                  " bytes, expected " + std::to_string(sizeof id));
    std::memcpy(&id, b.data(), sizeof id);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  const auto deadline = Clock::now() + timeout;
  while (r == ncclInProgress) {
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      throw Timeout(who + ": the group of " + std::to_string(size) + " did not form within " +
                    std::to_string(timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    const std::string m = nccl_message(r, comm);
    if (comm) ncclCommAbort(comm);
    throw Error(who + ": ncclCommInitRankConfig: " + m);
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, rank, size, device));
}

NcclCommunicator::~NcclCommunicator() {
  if (!comm_) return;
  if (aborted_) return;
  ncclCommDestroy(comm_);
}

void NcclCommunicator::fail(const std::string& op, ncclResult_t r) {
  const std::string m = nccl_message(r, comm_);
  ncclCommAbort(comm_);
  aborted_ = true;
  throw Error("rank " + std::to_string(rank_) + ": nccl " + op + ": " + m);
}

void NcclCommunicator::settle(ncclResult_t r, const char* op) {
  if (aborted_) throw Error("rank " + std::to_string(rank_) + ": nccl " + op + ": the communicator was aborted");
  while (r == ncclInProgress) {
    std::this_thread::yield();
    ncclCommGetAsyncError(comm_, &r);
  }
  if (r != ncclSuccess) fail(op, r);
}

void NcclCommunicator::allreduce(void* data, size_t count, comm::DataType t, comm::ReduceOp op,
                                 cudaStream_t stream) {
  settle(ncclAllReduce(data, data, count, type_of(t, "allreduce"), op_of(op, "allreduce"), comm_,
                       stream),
         "allreduce");
}

void NcclCommunicator::broadcast(void* data, size_t count, comm::DataType t, int root,
                                 cudaStream_t stream) {
  settle(ncclBroadcast(data, data, count, type_of(t, "broadcast"), root, comm_, stream), "broadcast");
}

void NcclCommunicator::all_gather(const void* in, void* out, size_t count_per_rank,
                                  comm::DataType t, cudaStream_t stream) {
  settle(ncclAllGather(in, out, count_per_rank, type_of(t, "all_gather"), comm_, stream),
         "all_gather");
}

void NcclCommunicator::reduce_scatter(const void* in, void* out, size_t count_per_rank,
                                      comm::DataType t, comm::ReduceOp op, cudaStream_t stream) {
  settle(ncclReduceScatter(in, out, count_per_rank, type_of(t, "reduce_scatter"),
                           op_of(op, "reduce_scatter"), comm_, stream),
         "reduce_scatter");
}

void NcclCommunicator::send(const void* data, size_t count, comm::DataType t, int peer,
                            cudaStream_t stream) {
  settle(ncclSend(data, count, type_of(t, "send"), peer, comm_, stream), "send");
}

void NcclCommunicator::recv(void* data, size_t count, comm::DataType t, int peer,
                            cudaStream_t stream) {
  settle(ncclRecv(data, count, type_of(t, "recv"), peer, comm_, stream), "recv");
}

void NcclCommunicator::wait(cudaStream_t stream, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      throw Error("rank " + std::to_string(rank_) + ": nccl wait: " + cudaGetErrorString(q));
    }
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) fail("wait", async);
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm_);
      aborted_ = true;
      throw Timeout("rank " + std::to_string(rank_) + ": nccl wait: the stream's collectives did "
                    "not finish within " + std::to_string(timeout.count()) + " ms (communicator aborted)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace heft::cuda
