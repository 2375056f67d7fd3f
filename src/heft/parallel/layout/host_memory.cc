#include "heft/parallel/layout/host_memory.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace heft::parallel::layout {

namespace {

// The first number in `path`, or -1 ("max" and unreadable files are -1).
int64_t read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return -1;
  try {
    return std::stoll(word);
  } catch (const std::exception&) {
    return -1;  // out of range: no limit
  }
}

// This process's cgroup v2 path ("0::/some/path"), or "" on v1 or without one.
std::string cgroup_v2_dir() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  return "";
}

// What the cgroup still allows, or -1 without a limit.
int64_t cgroup_room() {
  for (const std::string& dir : {cgroup_v2_dir(), std::string("/sys/fs/cgroup")}) {
    if (dir.empty()) continue;
    const int64_t max = read_number(dir + "/memory.max");
    const int64_t current = read_number(dir + "/memory.current");
    if (max > 0 && current >= 0) return max > current ? max - current : 0;
  }
  const int64_t limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  const int64_t usage = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  if (limit > 0 && usage >= 0 && limit < (int64_t{1} << 60)) return limit > usage ? limit - usage : 0;
  return -1;
}

int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      int64_t kib = -1;
      fields >> kib;
      return kib >= 0 ? kib * 1024 : -1;
    }
  return -1;
}

}  // namespace

int64_t available_host_memory(std::string* source) {
  const int64_t avail = mem_available();
  const int64_t room = cgroup_room();
  if (room >= 0 && (avail < 0 || room < avail)) {
    if (source) *source = "cgroup memory limit";
    return room;
  }
  if (source) *source = "MemAvailable";
  return avail < 0 ? 0 : avail;
}

int64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

double runnable_elsewhere(int samples, int interval_ms) {
  double sum = 0;
  int read = 0;
  for (int i = 0; i < samples; ++i) {
    std::ifstream in("/proc/stat");
    for (std::string line; std::getline(in, line);)
      if (line.rfind("procs_running ", 0) == 0) {
        sum += std::stod(line.substr(14));
        ++read;
      }
    if (i + 1 < samples) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  return read ? std::max(0.0, sum / read - 1) : 0;
}

}  // namespace heft::parallel::layout
