// The staging path (cuda/staging.h) without a device: a fake DeviceCopies copies at once and
// records the stream's operations, so the test sees the order a GPU would run them in and
// the overlap (chunk k+1's copy to the host queued before chunk k's collective runs), the
// results of a host "allreduce" in place, chunks cut on element boundaries, a slot reused only
// after its copy back, one pinned buffer for every call, bad arguments refused, a failing
// collective's error propagated after the queued copies; and cuda_copies() refused without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "heft/cuda/devices.h"
#include "heft/cuda/staging.h"
#include "heft/error.h"

namespace heft::cuda {
namespace {

// Copies at once; logs "h<chunk offset>" (to host), "d<offset>" (to device), "r<id>" (record),
// "w<id>" (wait), "c<offset>" (the collective, logged by the test's function).
class FakeCopies : public DeviceCopies {
 public:
  explicit FakeCopies(const char* device_base) : base_(device_base) {}
  void* alloc_pinned(size_t bytes) override {
    ++allocations;
    pinned.assign(bytes, 0);
    return pinned.data();
  }
  void free_pinned(void*) override { ++frees; }
  void to_host(void* host, const void* device, size_t bytes, Stream) override {
    std::memcpy(host, device, bytes);
    log.push_back("h" + std::to_string(static_cast<const char*>(device) - base_));
  }
  void to_device(void* device, const void* host, size_t bytes, Stream) override {
    std::memcpy(device, host, bytes);
    log.push_back("d" + std::to_string(static_cast<char*>(device) - base_));
  }
  int64_t record(Stream) override {
    log.push_back("r" + std::to_string(++next_));
    return next_;
  }
  void wait(int64_t marker) override { log.push_back("w" + std::to_string(marker)); }

  std::vector<std::string> log;
  std::vector<char> pinned;
  int allocations = 0, frees = 0;

 private:
  const char* base_;
  int64_t next_ = 0;
};

TEST(Staging, ChunksOverlapTheCollectiveAndComeBackReduced) {
  std::vector<float> device(1000);
  std::iota(device.begin(), device.end(), 0.f);
  FakeCopies copies(reinterpret_cast<const char*>(device.data()));
  Stager stager(copies, 1024);  // 256 floats a chunk: 4 chunks, the last of 232 floats
  std::vector<size_t> seen;
  stager.run(device.data(), device.size() * sizeof(float), sizeof(float), nullptr,
             [&](void* host, size_t bytes) {
               auto* f = static_cast<float*>(host);
               for (size_t i = 0; i < bytes / sizeof(float); ++i) f[i] *= 2;  // "allreduce" of 2 ranks
               seen.push_back(bytes);
               copies.log.push_back("c" + std::to_string(seen.size() - 1));
             });
  for (size_t i = 0; i < device.size(); ++i) ASSERT_EQ(device[i], 2.f * static_cast<float>(i)) << i;
  EXPECT_EQ(seen, (std::vector<size_t>{1024, 1024, 1024, 928}));
  const std::vector<std::string> want = {
      "h0", "r1",                              // chunk 0 to the host (slot 0)
      "h1024", "r2", "w1", "c0", "d0", "r3",     // chunk 1 queued before chunk 0's collective
      "w3", "h2048", "r4", "w2", "c1", "d1024", "r5",  // slot 0 again: after chunk 0's copy back
      "w5", "h3072", "r6", "w4", "c2", "d2048", "r7",  // slot 1 again: after chunk 1's
      "w6", "c3", "d3072", "r8",
      "w3", "w5", "w7", "w8"};  // every copy back landed before the call returns
  EXPECT_EQ(copies.log, want);
  EXPECT_EQ(stager.counters().chunks, 4u);
  EXPECT_EQ(stager.counters().overlapped, 3u);
  EXPECT_EQ(stager.counters().bytes, 4000u);
  EXPECT_EQ(copies.pinned.size(), 2048u) << "two chunks of pinned memory";
  stager.run(device.data(), 64, 4, nullptr, [](void*, size_t) {});
  EXPECT_EQ(copies.allocations, 1) << "the pinned buffer is kept";
}

TEST(Staging, ChunksAreWholeElementsAndBadArgumentsAreRefused) {
  std::vector<char> device(300, 1);
  FakeCopies copies(device.data());
  Stager stager(copies, 128);
  std::vector<size_t> sizes;
  stager.run(device.data(), 288, 24, nullptr, [&](void*, size_t b) { sizes.push_back(b); });
  EXPECT_EQ(sizes, (std::vector<size_t>{120, 120, 48})) << "128-byte chunks of 24-byte elements";
  EXPECT_THROW(stager.run(device.data(), 100, 8, nullptr, [](void*, size_t) {}), InvalidArgument);
  EXPECT_THROW(Stager(copies, 100), InvalidArgument);
  EXPECT_THROW(Stager(copies, 0), InvalidArgument);
  stager.run(device.data(), 0, 4, nullptr, [](void*, size_t) { FAIL() << "nothing to stage"; });
}

TEST(Staging, AFailingCollectiveSurfacesAfterTheQueuedCopies) {
  std::vector<char> device(512, 1);
  FakeCopies copies(device.data());
  Stager stager(copies, 128);
  int calls = 0;
  EXPECT_THROW(stager.run(device.data(), 512, 1, nullptr,
                          [&](void*, size_t) {
                            if (++calls == 2) throw PeerLost(0, 1, "allreduce", "gone");
                          }),
               PeerLost);
  EXPECT_EQ(calls, 2);
  ASSERT_GE(copies.log.size(), 2u);
  EXPECT_EQ(copies.log[copies.log.size() - 2].front(), 'r') << "a marker after the queued copies";
  EXPECT_EQ(copies.log.back().front(), 'w') << "and waited for before the error surfaces";
}

TEST(Staging, TheRuntimesCopiesNeedAGpu) {
  if (!probe_gpus().devices.empty()) GTEST_SKIP() << "this machine has a GPU";
  try {
    cuda_copies();
    FAIL() << "CUDA copies without a GPU";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("staging: no GPU (", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace heft::cuda
