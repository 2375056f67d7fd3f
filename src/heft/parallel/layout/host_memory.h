// The memory a host can give its ranks, for the layout search's default limit: the smaller
// of /proc/meminfo's MemAvailable and what the process's cgroup still allows (cgroup v2
// memory.max - memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes), and a
// process's resident bytes (/proc/self/statm). Torch-free; Linux only.
#pragma once

#include <cstdint>
#include <string>

namespace heft::parallel::layout {

// Bytes this host can still give (see above); `source`, when given, receives where the figure
// came from ("MemAvailable", "cgroup memory.max"). 0 when neither can be read.
int64_t available_host_memory(std::string* source = nullptr);

// This process's resident set now, in bytes (0 when /proc/self/statm cannot be read).
int64_t resident_bytes();

}  // namespace heft::parallel::layout
