#include "heft/comm/cpu.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

#include "heft/error.h"

namespace heft::comm {

namespace {

KernelIsa detect() {
  KernelIsa isa = cpu_supports(KernelIsa::kAvx2) ? KernelIsa::kAvx2 : KernelIsa::kPortable;
  const char* forced = std::getenv("HEFT_KERNELS");
  if (!forced || !*forced) return isa;
  const std::string v = forced;
  if (v == "portable") return KernelIsa::kPortable;
  if (v == "auto" || v == "avx2") return isa;  // avx2 where the CPU lacks it: portable
  throw InvalidArgument("HEFT_KERNELS: expected auto, avx2 or portable, found '" + v + "'");
}

std::atomic<int>& current() {
  static std::atomic<int> isa{static_cast<int>(detect())};
  return isa;
}

}  // namespace

const char* name(KernelIsa isa) { return isa == KernelIsa::kAvx2 ? "avx2" : "portable"; }

bool cpu_supports(KernelIsa isa) {
  if (isa == KernelIsa::kPortable) return true;
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

KernelIsa kernel_isa() { return static_cast<KernelIsa>(current().load(std::memory_order_relaxed)); }

bool set_kernel_isa(KernelIsa isa) {
  if (!cpu_supports(isa)) return false;
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

size_t last_level_cache_bytes() {
  static const size_t bytes = [] {
    // /sys first: what the kernel read from CPUID for cpu0 (the highest index is the last
    // level, "32768K"). glibc's sysconf can be far off inside a VM (320 MiB for a 32 MiB L3
    // seen on one).
    size_t found = 0;
    for (int index = 0; index < 8; ++index) {
      std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
      std::string s;
      if (!(f >> s) || s.empty()) continue;
      size_t v = std::strtoull(s.c_str(), nullptr, 10);
      if (s.back() == 'K') v <<= 10;
      if (s.back() == 'M') v <<= 20;
      found = std::max(found, v);
    }
    if (found) return found;
    for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE}) {
      const long v = sysconf(name);
      if (v > 0) return static_cast<size_t>(v);
    }
    return size_t{32} << 20;
  }();
  return bytes;
}

}  // namespace heft::comm
