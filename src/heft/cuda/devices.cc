#include "heft/cuda/devices.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

namespace heft::cuda {

GpuInventory probe_gpus() {
  GpuInventory out;
  cudaRuntimeGetVersion(&out.runtime_version);
  if (cudaDriverGetVersion(&out.driver_version) != cudaSuccess) out.driver_version = 0;
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    out.reason = std::string(cudaGetErrorString(e)) + " (cudaGetDeviceCount: " +
                 cudaGetErrorName(e) + ")";
    cudaGetLastError();  // the error is ours to report, not the next call's
    return out;
  }
  if (count == 0) out.reason = "the CUDA runtime reports 0 devices";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    GpuDevice d;
    d.index = i;
    d.name = p.name;
    d.memory_bytes = static_cast<int64_t>(p.totalGlobalMem);
    d.major = p.major;
    d.minor = p.minor;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) d.pci_bus_id = bus;
    out.devices.push_back(std::move(d));
  }
  return out;
}

int nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

std::string nccl_version_text(int code) {
  // NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace heft::cuda
