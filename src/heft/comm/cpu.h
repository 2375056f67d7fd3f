// What the data kernels (copy.h, reduce.h) may use on this CPU, decided once at run time:
// binaries are built for baseline x86-64 (no -march=native) and move between machines, so
// the AVX2 forms are compiled beside the portable ones and picked here.
//
// Deliberately left out: AVX-512 (AVX2 already saturates memory on the machines we run on),
// non-x86 vector forms (they get the portable loops, which the compiler vectorises).
#pragma once

#include <cstddef>

namespace heft::comm {

enum class KernelIsa { kPortable, kAvx2 };
// "portable", "avx2".
const char* name(KernelIsa isa);

// The kernels in use: AVX2 where the CPU has it, else portable. HEFT_KERNELS=portable forces
// the portable forms (avx2 | auto: the default). Thread-safe.
KernelIsa kernel_isa();
// Whether this CPU can run `isa`.
bool cpu_supports(KernelIsa isa);
// Switches the kernels (tests and benchmarks compare both forms). Returns false, changing
// nothing, when the CPU lacks `isa`. Thread-safe, but kernels running meanwhile may use
// either form.
bool set_kernel_isa(KernelIsa isa);

// Bytes of the last-level cache (sysconf, then /sys; 32 MiB when neither says). Stores past
// it are streamed (non-temporal) by the kernels when the caller asks for it.
size_t last_level_cache_bytes();

}  // namespace heft::comm
