// The memory a host can give its ranks, for the layout search's default limit: the smaller
// of /proc/meminfo's MemAvailable and what the process's cgroup still allows (cgroup v2
// memory.max - memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes), and a
// process's resident bytes (/proc/self/statm), and the host's other runnable threads (the
// contention the search prices). Torch-free; Linux only.
#pragma once

#include <cstdint>
#include <string>

namespace heft::parallel::layout {

// Bytes this host can still give (see above); `source`, when given, receives where the figure
// came from ("MemAvailable", "cgroup memory.max"). 0 when neither can be read.
int64_t available_host_memory(std::string* source = nullptr);

// This process's resident set now, in bytes (0 when /proc/self/statm cannot be read).
int64_t resident_bytes();

// The host's runnable threads outside this process, each weighted by its CPU share against
// a nice-0 thread (CFS: 1024 / 1.25^nice, so a `nice -n 19` build counts 0.015): the load
// that takes cores from the job's ranks. /proc/*/task/*/stat's runnable threads, sampled
// `samples` times `interval_ms` apart (blocks about samples x interval_ms) and averaged; 0 when
// /proc cannot be read. Sample while the job's other ranks wait asleep.
double runnable_elsewhere(int samples = 20, int interval_ms = 10);

// One thread's weight in runnable_elsewhere from its /proc/PID/task/TID/stat line: 1.25^-nice
// (the kernel's CFS weight against nice 0's, within a few percent) when its state is R, else
// 0 (also for a line that cannot be read).
double stat_runnable_weight(const std::string& stat_line);

}  // namespace heft::parallel::layout
