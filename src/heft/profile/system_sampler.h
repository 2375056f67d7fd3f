// System metrics of a job's workers from /proc, sampled by the supervisor (about once a
// second): per rank, the CPU its process group used (the worker and every child it started:
// they share its process group), split into user and system time, its resident memory, its
// I/O and threads; per core of this machine, the share of time busy; the machine's memory
// (/proc/meminfo MemTotal and MemAvailable).
//
// A sample is a difference between two reads: the first sample() after set_workers() only
// records the baseline and returns nothing for the ranks.
//
// Deliberately left out: GPUs, network counters, processes outside the workers' groups.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace heft::profile {

struct RankSample {
  int rank = 0;
  double cpu_percent = 0;     // user + system, 100 = one core busy
  double user_percent = 0;
  double system_percent = 0;
  double rss_mb = 0;          // summed over the process group
  double read_mb_s = 0;       // storage I/O (/proc/PID/io read_bytes, write_bytes)
  double write_mb_s = 0;
  int threads = 0;
  int processes = 0;
};

struct SystemSample {
  double timestamp = 0;  // Unix seconds
  std::string host;      // where it was read; "": this machine (the supervisor's)
  int cores = 0;         // online cores of that host (0: not given, this machine's)
  double memory_mb = 0;            // that host's memory, MemTotal (0: not given)
  double memory_available_mb = 0;  // its MemAvailable when read (0: not given)
  std::vector<RankSample> ranks;
  std::vector<double> core_busy_percent;  // per core of the machine, 0-100
};

class SystemSampler {
 public:
  // The workers of a new start: pids by rank (each leads its own process group).
  void set_workers(const std::vector<int>& pids);
  // Reads /proc now. Ranks whose process group has no process left are omitted.
  SystemSample sample();
  // Cores of this machine (online CPUs).
  static int cores();
  // This machine's MemTotal and MemAvailable from /proc/meminfo, in MB (a field it lacks
  // stays 0).
  static void memory(double* total_mb, double* available_mb);

 private:
  struct Counters {
    double cpu_user_s = 0, cpu_system_s = 0;
    double read_bytes = 0, write_bytes = 0;
  };
  struct CoreTimes {
    uint64_t busy = 0, total = 0;
  };
  // One pass over /proc: each worker group's counters (by rank) and its sample's memory,
  // threads and processes (the rates left zero).
  void read_groups(std::map<int, Counters>* counters, std::map<int, RankSample>* samples) const;
  // /proc/stat: each core's busy and total time so far.
  static std::vector<CoreTimes> read_cores();
  std::vector<int> pids_;
  std::map<int, Counters> last_;  // by rank
  std::vector<CoreTimes> last_cores_;
  double last_time_ = 0;
};

// A rank's sample as its worker shim publishes it to the supervisor through the job's store
// (key rank_sample_key): one line of text, "heft-sample-2 HOST TIMESTAMP CORES MEMORY
// AVAILABLE CPU USER SYSTEM RSS READ WRITE THREADS PROCESSES CORE0 CORE1 ..." (MEMORY and
// AVAILABLE: the host's MemTotal and MemAvailable in MB, 0 when unknown). `s` holds at most
// one rank (its first is encoded; none: the rank fields are zero and PROCESSES is 0). Host
// names hold no spaces.
std::string encode_rank_sample(const SystemSample& s);
// The sample `text` encodes, its one rank numbered `rank`; false when `text` is not one
// (an unknown version, a missing or non-numeric field). Also reads the older
// "heft-sample-1", which has no MEMORY and AVAILABLE (left 0), from shims of older heft
// versions.
bool decode_rank_sample(const std::string& text, int rank, SystemSample* out);
// "<job>/world/system/<rank>": where rank's shim keeps its newest sample.
std::string rank_sample_key(const std::string& job, int rank);

}  // namespace heft::profile
