// The GPUs this process can use and the NCCL it links, from the CUDA toolkit's runtime and
// NCCL (built when CMake finds them: -DHEFT_WITH_CUDA=AUTO|ON|OFF, docs/gpu.md). Torch-free,
// below comm/ and job/, as host/ is: what a host has, asked of the driver.
//
// probe_gpus() never throws: a machine without a driver or a device answers with no devices
// and the runtime's reason ("no CUDA-capable device is detected", "CUDA driver version is
// insufficient for CUDA runtime version"), which is what GPU tests skip with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heft::cuda {

struct GpuDevice {
  int index = 0;                 // the runtime's ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;              // "NVIDIA H200"
  int64_t memory_bytes = 0;      // total global memory
  int major = 0, minor = 0;      // compute capability (9.0 for Hopper)
  std::string pci_bus_id;        // "0000:19:00.0"
};

struct GpuInventory {
  std::vector<GpuDevice> devices;
  std::string reason;  // why there are none (empty when there are some)
  int runtime_version = 0;  // cudaRuntimeGetVersion: 13000 for 13.0
  int driver_version = 0;   // cudaDriverGetVersion: 0 without a driver
};

GpuInventory probe_gpus();

// NCCL's version code as ncclGetVersion gives it (22800 for 2.28.0) and as text ("2.28.0").
// Answers without a GPU: it only proves NCCL is linked.
int nccl_version();
std::string nccl_version_text(int code);

}  // namespace heft::cuda
