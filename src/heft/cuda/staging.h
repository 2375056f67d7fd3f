// Staging: a collective on CUDA memory run by heft's host collectives, for ranks that share a
// GPU or have no NCCL (nccl_dispatch.h chooses it), the way Gloo serves CUDA tensors. The
// buffer goes to pinned host memory chunk by chunk on the caller's stream, each chunk's host
// collective runs as soon as its copy has landed (an event per chunk) while the next chunk's
// copy is already queued, and each reduced chunk goes back on the stream: the copies overlap
// the collective. Elementwise collectives only (allreduce, broadcast): a chunk's result
// depends on that chunk alone.
//
// The device side is an interface (DeviceCopies): cuda_copies() is the CUDA runtime's; tests
// give a fake that copies at once and records the order of the stream's operations, so the
// order and the overlap are checked where no device answers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace heft::cuda {

using Stream = void*;  // a cudaStream_t (nullptr: the default stream)

class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  // Page-locked host memory (cudaMallocHost); throws heft::Error naming the bytes.
  virtual void* alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) = 0;
  // Queued on `stream`, in its order.
  virtual void to_host(void* host, const void* device, size_t bytes, Stream stream) = 0;
  virtual void to_device(void* device, const void* host, size_t bytes, Stream stream) = 0;
  // A marker after everything queued on `stream` so far, and waiting for it on the host.
  virtual int64_t record(Stream stream) = 0;
  virtual void wait(int64_t marker) = 0;
};

// The CUDA runtime's (cudaMallocHost, cudaMemcpyAsync, events). Throws heft::InvalidArgument
// naming the runtime's reason where no device answers.
std::unique_ptr<DeviceCopies> cuda_copies();

struct StagingCounters {
  uint64_t calls = 0, chunks = 0, bytes = 0;
  uint64_t overlapped = 0;  // chunks whose host collective ran with the next chunk's copy queued
};

class Stager {
 public:
  // chunk_bytes: the pipeline's step (a multiple of 64; 4 MiB by default). The pinned buffer
  // (two chunks: one being reduced while the next lands) is allocated on the first call and
  // kept.
  explicit Stager(DeviceCopies& copies, size_t chunk_bytes = size_t{4} << 20);
  ~Stager();
  Stager(const Stager&) = delete;
  Stager& operator=(const Stager&) = delete;

  // In place on `device` (bytes long; elements of `element_bytes`, chunks cut on element
  // boundaries): for every chunk, `host_collective(pinned, chunk_bytes)` runs on the host copy
  // and its result goes back. Returns once the last chunk's copy back is queued on `stream`
  // (the caller's later work on the stream sees the result). host_collective's exception
  // propagates after the queued copies are waited for, leaving the device buffer partly
  // updated (a failed collective's result is undefined, as NCCL's).
  void run(void* device, size_t bytes, size_t element_bytes, Stream stream,
           const std::function<void(void* host, size_t bytes)>& host_collective);

  const StagingCounters& counters() const { return counters_; }
  size_t chunk_bytes() const { return chunk_; }

 private:
  DeviceCopies& copies_;
  size_t chunk_;
  void* pinned_ = nullptr;  // 2 * chunk_
  StagingCounters counters_;
};

}  // namespace heft::cuda
