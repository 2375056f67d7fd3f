// The worker contract's defaults (worker.h): what heft's readers take when a variable is
// unset. A header of its own, so that comm's widely included headers (store.h, options.h) use
// the one default without depending on the table.
#pragma once

#include <cstdint>

namespace heft::contract {

inline constexpr int kDefaultTimeoutS = 300;          // HEFT_TIMEOUT, seconds
inline constexpr int64_t kDefaultStopGraceMs = 5000;  // HEFT_STOP_GRACE_MS
inline constexpr const char* kDefaultJob = "heft";    // HEFT_JOB: the store namespace

}  // namespace heft::contract
