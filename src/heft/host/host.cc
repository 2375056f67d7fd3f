#include "heft/host/host.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

namespace heft::host {

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

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The thread's weight (stat_runnable_weight), or `group` (>= 0: its process's autogroup
// weight against ours) when it is runnable.
double runnable_weight(const std::string& stat_path, double group) {
  const double own = stat_runnable_weight(first_line(stat_path));
  return own > 0 && group >= 0 ? group : own;
}

// The "/autogroup-N" id and nice of an autogroup line; false when it cannot be read.
bool parse_autogroup(const std::string& line, std::string* id, double* nice) {
  std::istringstream fields(line);
  std::string word;
  if (!(fields >> *id >> word >> *nice) || word != "nice" || id->rfind("/autogroup-", 0) != 0) return false;
  return true;
}

// The runnable threads of the host's other processes, each weighted by its CFS share
// (runnable_weight); -1 when /proc cannot be read.
double runnable_other_threads() {
  DIR* proc = ::opendir("/proc");
  if (!proc) return -1;
  const std::string self = std::to_string(::getpid());
  const std::string ours = first_line("/proc/self/autogroup");
  double sum = 0;
  while (const dirent* p = ::readdir(proc)) {
    const std::string pid = p->d_name;
    if (pid == self || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    DIR* tasks = ::opendir(("/proc/" + pid + "/task").c_str());
    if (!tasks) continue;  // gone meanwhile
    double group = -2;  // read once, when one of its threads is runnable
    while (const dirent* t = ::readdir(tasks)) {
      if (t->d_name[0] == '.') continue;
      const std::string stat = "/proc/" + pid + "/task/" + t->d_name + "/stat";
      if (group == -2 && stat_runnable_weight(first_line(stat)) > 0)
        group = autogroup_weight(ours, first_line("/proc/" + pid + "/autogroup"));
      sum += runnable_weight(stat, group);
    }
    ::closedir(tasks);
  }
  ::closedir(proc);
  return sum;
}

}  // namespace

double autogroup_weight(const std::string& ours, const std::string& theirs) {
  std::string our_id, their_id;
  double our_nice = 0, their_nice = 0;
  if (!parse_autogroup(ours, &our_id, &our_nice) || !parse_autogroup(theirs, &their_id, &their_nice) ||
      our_id == their_id)
    return -1;
  return std::min(1.0, std::pow(1.25, our_nice - their_nice));
}

double stat_runnable_weight(const std::string& line) {
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 1));
  std::string state, field;
  fields >> state;
  if (state != "R") return 0;
  for (int f = 4; f <= 19 && fields >> field; ++f)  // field 19: nice
    if (f == 19) {
      char* end = nullptr;
      const double nice = std::strtod(field.c_str(), &end);
      return *end == '\0' ? std::pow(1.25, -nice) : 0;
    }
  return 0;
}

MemInfo meminfo() {
  // "MemTotal:       16314152 kB"
  MemInfo m;
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    int64_t* field = line.rfind("MemTotal:", 0) == 0       ? &m.total
                     : line.rfind("MemAvailable:", 0) == 0 ? &m.available
                                                           : nullptr;
    if (!field) continue;
    std::istringstream fields(line.substr(line.find(':') + 1));
    int64_t kib = -1;
    if (fields >> kib && kib >= 0) *field = kib * 1024;
  }
  return m;
}

int online_cpus() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int visible_gpus(const std::string& proc_root, const char* visible) {
  int devices = 0;
  if (DIR* d = ::opendir((proc_root + "/driver/nvidia/gpus").c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++devices;
    ::closedir(d);
  }
  if (visible == nullptr) return devices;
  int seen = 0;
  std::stringstream entries(visible);
  for (std::string entry; std::getline(entries, entry, ',');) {
    entry.erase(0, entry.find_first_not_of(' '));
    entry.erase(entry.find_last_not_of(' ') + 1);
    const bool uuid = entry.rfind("GPU-", 0) == 0 || entry.rfind("MIG-", 0) == 0;
    char* end = nullptr;
    const long index = entry.empty() ? -1 : std::strtol(entry.c_str(), &end, 10);
    if (!uuid && (entry.empty() || *end != '\0' || index < 0 || index >= devices)) break;  // the runtime stops here
    ++seen;
  }
  return std::min(seen, devices);
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return online_cpus();
}

int64_t available_memory(std::string* source) {
  const int64_t avail = meminfo().available;
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

bool reset_peak_resident() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

int64_t peak_resident_since_reset() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t kb = 0;
    return (fields >> kb) ? kb * 1024 : 0;
  }
  return 0;
}

double runnable_elsewhere(int samples, int interval_ms) {
  double sum = 0;
  int read = 0;
  for (int i = 0; i < samples; ++i) {
    const double now = runnable_other_threads();
    if (now >= 0) sum += now, ++read;
    if (i + 1 < samples) std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  return read ? sum / read : 0;
}

std::string address_toward(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(name.c_str(), "9", &hints, &found) != 0 || !found) return "";
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  std::string out;
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0) {  // sends nothing
    sockaddr_in me{};
    socklen_t len = sizeof(me);
    char buf[INET_ADDRSTRLEN] = {0};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof(buf)))
      out = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(found);
  return out;
}

}  // namespace heft::host
