// Host facts, one module for everything that asks them (the layout search and heft-train's
// auto layout, the profiler's system sampler, the launchers' core counts, the Python package
// through the binding): the memory a host can give its ranks, the smaller of /proc/meminfo's
// MemAvailable and what the process's cgroup still allows (cgroup v2 memory.max -
// memory.current, or v1 memory.limit_in_bytes - memory.usage_in_bytes); /proc/meminfo itself;
// a process's resident bytes (/proc/self/statm); the CPUs and the GPUs; and the host's other runnable
// threads (the contention the layout search prices). Depends on nothing but the standard
// library; Linux only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

namespace heft::host {

// This host's IPv4 address on its route toward `name` (a host name or an address): what a peer
// there reaches this host at. A UDP socket connected toward it (nothing is sent) and
// getsockname(). "" when `name` does not resolve to an IPv4 address or no route leads there.
std::string address_toward(const std::string& name);

// Bytes this host can still give (see above); `source`, when given, receives where the figure
// came from ("MemAvailable", "cgroup memory limit"). 0 when neither can be read.
int64_t available_memory(std::string* source = nullptr);

// /proc/meminfo's MemTotal and MemAvailable in bytes, the machine's whatever the cgroup (-1
// for a field it lacks or a file that cannot be read).
struct MemInfo {
  int64_t total = -1;
  int64_t available = -1;
};
MemInfo meminfo();

// The CPUs online (sysconf), at least 1.
int online_cpus();
// The CPUs this process may run on (its affinity), else online_cpus(); at least 1.
int available_cpus();

// The NVIDIA GPUs a process started here sees, without the CUDA runtime (the launchers are
// torch- and CUDA-free): the driver's devices (one folder each under
// <proc_root>/driver/nvidia/gpus), narrowed by CUDA_VISIBLE_DEVICES as the runtime reads it
// (`visible`, null: unset): its comma-separated entries up to the first that names no device
// (an index in [0, devices), or a `GPU-`/`MIG-` UUID prefix, counted as one), at most the
// devices; "" or "-1" hides every GPU. 0 without the driver.
int visible_gpus(const std::string& proc_root = "/proc", const char* visible = std::getenv("CUDA_VISIBLE_DEVICES"));

// This process's resident set now, in bytes (0 when /proc/self/statm cannot be read).
int64_t resident_bytes();

// This process's peak resident set (VmHWM), reset to its resident set now: writes "5" to
// /proc/self/clear_refs (Linux 4.0+). False where the kernel refuses (the peak then stays the
// process's lifetime one).
bool reset_peak_resident();
// This process's peak resident set since it started or since reset_peak_resident(), in bytes
// (/proc/self/status's VmHWM; 0 when it cannot be read).
int64_t peak_resident_since_reset();

// The host's runnable threads outside this process, each weighted by its CPU share against
// a nice-0 thread of this process's: the load that takes cores from the job's ranks. In this
// process's autogroup (or without autogroups) CFS weighs a thread by its nice (1024 /
// 1.25^nice, so a `nice -n 19` thread counts 0.015); a thread of another autogroup (another
// session, sched_autogroup_enabled) by its group's nice against ours (autogroup_weight), its
// own nice aside: a `nice -n 19` build started in another session takes a whole core, and a
// job in a session of autogroup nice -20 sees the others' threads at 1.25^-20 each. /proc/*/task/*/stat's runnable threads, sampled
// `samples` times `interval_ms` apart (blocks about samples x interval_ms) and averaged; 0 when
// /proc cannot be read. Sample while the job's other ranks wait asleep.
double runnable_elsewhere(int samples = 20, int interval_ms = 10);

// A thread's weight in runnable_elsewhere from its process's /proc/PID/autogroup line against
// this process's ("/autogroup-12 nice 0"): 1.25^(our nice - its nice) for another autogroup,
// at most 1 (a thread runs on one core however heavy its group: a nice -20 session's thread
// counts as a nice-0 one of ours); -1 for the same one or a line that cannot be read (the
// thread's own nice applies).
double autogroup_weight(const std::string& ours, const std::string& theirs);

// One thread's weight in runnable_elsewhere from its /proc/PID/task/TID/stat line: 1.25^-nice
// (the kernel's CFS weight against nice 0's, within a few percent) when its state is R, else
// 0 (also for a line that cannot be read).
double stat_runnable_weight(const std::string& stat_line);

}  // namespace heft::host
