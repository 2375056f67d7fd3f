// ctest-labels: cuda
// On a machine with a GPU (skipped elsewhere, naming the runtime's reason): the probe names
// each device, memory and compute capability, and NCCL's version beside it.
#include <gtest/gtest.h>

#include "heft/cuda/devices.h"

namespace heft::cuda {
namespace {

TEST(GpuDevice, ProbeNamesEachDevice) {
  const GpuInventory inv = probe_gpus();
  if (inv.devices.empty()) GTEST_SKIP() << "no GPU: " << inv.reason;
  for (const GpuDevice& d : inv.devices) {
    EXPECT_FALSE(d.pci_bus_id.empty()) << d.name;
    EXPECT_GE(d.memory_bytes, int64_t{1} << 30) << d.name;
    std::printf("gpu %d: %s, %.1f GiB, sm_%d%d, %s; driver %d, runtime %d, NCCL %s\n", d.index,
                d.name.c_str(), static_cast<double>(d.memory_bytes) / (1 << 30), d.major,
                d.minor, d.pci_bus_id.c_str(), inv.driver_version, inv.runtime_version,
                nccl_version_text(nccl_version()).c_str());
  }
}

}  // namespace
}  // namespace heft::cuda
