// ctest-labels: cuda
// NCCL on a real GPU at world size 1 (the only size one GPU runs; skipped without a GPU):
// the communicator forms over heft's store, and allreduce (sum, avg), broadcast, all_gather
// and reduce_scatter give one rank's exact answers on device memory; wait() returns. And the
// staging path with the CUDA runtime's copies: a host function applied chunk by chunk to
// device memory through pinned buffers, on a stream.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "heft/comm/store/memory_store.h"
#include "heft/cuda/devices.h"
#include "heft/cuda/nccl_communicator.h"
#include "heft/cuda/staging.h"

namespace heft::cuda {
namespace {

TEST(NcclDevice, OneRankCollectivesOnTheGpu) {
  const GpuInventory inv = probe_gpus();
  if (inv.devices.empty()) GTEST_SKIP() << "no GPU: " << inv.reason;
  comm::MemoryStore store;
  auto nccl = NcclCommunicator::create(store, "t", 0, 1, 0, std::chrono::seconds(60));
  const size_t n = 1 << 20;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  nccl->allreduce(a, n, comm::DataType::f32, comm::ReduceOp::sum, s);
  nccl->allreduce(a, n, comm::DataType::f32, comm::ReduceOp::avg, s);
  nccl->broadcast(a, n, comm::DataType::f32, 0, s);
  nccl->all_gather(a, b, n, comm::DataType::f32, s);
  nccl->reduce_scatter(b, a, n, comm::DataType::f32, comm::ReduceOp::max, s);
  nccl->wait(s, std::chrono::seconds(60));
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), a, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host) << "one rank: every collective gives its own values back";
  cudaStreamDestroy(s);
  cudaFree(a);
  cudaFree(b);
}

TEST(StagingDevice, HostCollectiveOnDeviceMemoryThroughPinnedChunks) {
  const GpuInventory inv = probe_gpus();
  if (inv.devices.empty()) GTEST_SKIP() << "no GPU: " << inv.reason;
  auto copies = cuda_copies();
  Stager stager(*copies, 1 << 16);
  const size_t n = 1000003;
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 977);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, n * sizeof(float)), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  stager.run(d, n * sizeof(float), sizeof(float), s, [](void* p, size_t bytes) {
    auto* f = static_cast<float*>(p);
    for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] += 1.f;
  });
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<float> back(n);
  ASSERT_EQ(cudaMemcpy(back.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], host[i] + 1.f) << i;
  EXPECT_GT(stager.counters().overlapped, 0u);
  cudaStreamDestroy(s);
  cudaFree(d);
}

}  // namespace
}  // namespace heft::cuda
