// The CUDA parts' build on any machine with the toolkit (no GPU needed): NCCL is linked and
// answers its version, and the GPU probe answers without throwing: devices with names and
// memory, or none with the runtime's reason (what the `cuda` tests skip with).
#include <gtest/gtest.h>

#include "heft/cuda/devices.h"

namespace heft::cuda {
namespace {

TEST(GpuProbe, NcclIsLinkedAndAnswers) {
  const int v = nccl_version();
  EXPECT_GE(v, 22000) << "NCCL " << v << ": the toolkit's is 2.28";
  EXPECT_EQ(nccl_version_text(22800), "2.28.0");
  EXPECT_EQ(nccl_version_text(2708), "2.7.8");
}

TEST(GpuProbe, AnswersWithDevicesOrAReason) {
  const GpuInventory inv = probe_gpus();
  EXPECT_GT(inv.runtime_version, 0);
  if (inv.devices.empty()) {
    EXPECT_FALSE(inv.reason.empty()) << "no devices and no reason";
  } else {
    EXPECT_TRUE(inv.reason.empty()) << inv.reason;
    for (const GpuDevice& d : inv.devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.memory_bytes, 0) << d.name;
      EXPECT_GT(d.major, 0) << d.name;
    }
  }
  const GpuInventory again = probe_gpus();  // a second probe after a failed one answers the same
  EXPECT_EQ(again.devices.size(), inv.devices.size());
  EXPECT_EQ(again.reason, inv.reason);
}

}  // namespace
}  // namespace heft::cuda
