#include "heft/cuda/staging.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>

#include "heft/error.h"

namespace heft::cuda {

namespace {

class CudaCopies : public DeviceCopies {
 public:
  ~CudaCopies() override {
    for (auto& [id, e] : events_) cudaEventDestroy(e);
  }
  void* alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    if (const cudaError_t e = cudaMallocHost(&p, bytes); e != cudaSuccess) {
      cudaGetLastError();
      throw Error("staging: cudaMallocHost(" + std::to_string(bytes) + " bytes): " +
                  cudaGetErrorString(e));
    }
    return p;
  }
  void free_pinned(void* p) override { cudaFreeHost(p); }
  void to_host(void* host, const void* device, size_t bytes, Stream s) override {
    check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(s)),
          "cudaMemcpyAsync to the host");
  }
  void to_device(void* device, const void* host, size_t bytes, Stream s) override {
    check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(s)),
          "cudaMemcpyAsync to the device");
  }
  int64_t record(Stream s) override {
    cudaEvent_t e;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(e, static_cast<cudaStream_t>(s)), "cudaEventRecord");
    events_[++next_] = e;
    return next_;
  }
  void wait(int64_t marker) override {
    const auto it = events_.find(marker);
    if (it == events_.end()) return;
    const cudaError_t r = cudaEventSynchronize(it->second);
    cudaEventDestroy(it->second);
    events_.erase(it);
    check(r, "cudaEventSynchronize");
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    cudaGetLastError();
    throw Error(std::string("staging: ") + what + ": " + cudaGetErrorString(e));
  }
  std::map<int64_t, cudaEvent_t> events_;
  int64_t next_ = 0;
};

}  // namespace

std::unique_ptr<DeviceCopies> cuda_copies() {
  int n = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&n); e != cudaSuccess || n == 0) {
    cudaGetLastError();
    throw InvalidArgument(std::string("staging: no GPU (") +
                          (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  return std::make_unique<CudaCopies>();
}

Stager::Stager(DeviceCopies& copies, size_t chunk_bytes) : copies_(copies), chunk_(chunk_bytes) {
  if (chunk_ == 0 || chunk_ % 64 != 0)
    throw InvalidArgument("staging: chunk_bytes must be a positive multiple of 64, got " +
                          std::to_string(chunk_bytes));
}

Stager::~Stager() {
  if (pinned_) copies_.free_pinned(pinned_);
}

void Stager::run(void* device, size_t bytes, size_t element_bytes, Stream stream,
                 const std::function<void(void* host, size_t bytes)>& host_collective) {
  if (element_bytes == 0 || bytes % element_bytes != 0)
    throw InvalidArgument("staging: " + std::to_string(bytes) + " bytes are not whole elements of " +
                          std::to_string(element_bytes));
  ++counters_.calls;
  if (bytes == 0) return;
  if (!pinned_) pinned_ = copies_.alloc_pinned(2 * chunk_);
  const size_t step = std::max(element_bytes, chunk_ - chunk_ % element_bytes);
  const size_t chunks = (bytes + step - 1) / step;
  auto* dev = static_cast<char*>(device);
  auto* host = static_cast<char*>(pinned_);
  auto slot = [&](size_t k) { return host + (k % 2) * chunk_; };
  auto size_of = [&](size_t k) { return std::min(step, bytes - k * step); };
  // Chunk k's copy to the host and its marker; chunk k + 1's is queued before chunk k's
  // collective runs. Slot k % 2 is free again once chunk k - 2's copy back has landed.
  std::vector<int64_t> landed(chunks), returned(chunks, -1);
  auto stage_in = [&](size_t k) {
    if (k >= 2) copies_.wait(returned[k - 2]);
    copies_.to_host(slot(k), dev + k * step, size_of(k), stream);
    landed[k] = copies_.record(stream);
  };
  stage_in(0);
  std::exception_ptr failed;
  for (size_t k = 0; k < chunks && !failed; ++k) {
    if (k + 1 < chunks) {
      stage_in(k + 1);
      ++counters_.overlapped;
    }
    copies_.wait(landed[k]);
    try {
      host_collective(slot(k), size_of(k));
    } catch (...) {
      failed = std::current_exception();
      break;
    }
    copies_.to_device(dev + k * step, slot(k), size_of(k), stream);
    returned[k] = copies_.record(stream);
    ++counters_.chunks;
    counters_.bytes += size_of(k);
  }
  if (failed) {  // the queued copies still read the pinned buffer: let them finish
    copies_.wait(copies_.record(stream));
    std::rethrow_exception(failed);
  }
  // The pinned buffer is reused by the next call: every copy back must have landed (the
  // last one's marker covers the earlier ones on the same stream; each is waited to free it).
  for (size_t k = 0; k < chunks; ++k) copies_.wait(returned[k]);
}

}  // namespace heft::cuda
