// Terms: a worker's *group* is its process group (the launcher starts every worker as the
// leader of its own), so the children a worker starts (data loaders, a shell) count for
// its rank. One pass over /proc finds every process and its group.
#include "heft/profile/system_sampler.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "heft/host/host.h"
#include "heft/job/record/job_db.h"

namespace heft::profile {

namespace {

using job::unix_now;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct ProcInfo {
  int pgrp = 0;
  double utime_s = 0, stime_s = 0;
  double rss_mb = 0;
  int threads = 0;
};

// /proc/PID/stat: fields after the command (which may hold spaces and parentheses).
bool read_stat(int pid, ProcInfo* out) {
  const std::string text = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = text.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream in(text.substr(close + 2));
  std::string f[50];
  for (int i = 0; i < 22 && in >> f[i]; ++i) {
  }
  // f[0] state (field 3), f[2] pgrp (5), f[11] utime (14), f[12] stime (15), f[17]
  // num_threads (20), f[21] rss pages (24).
  static const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  static const double page_mb = static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
  out->pgrp = std::atoi(f[2].c_str());
  out->utime_s = std::atof(f[11].c_str()) / tick;
  out->stime_s = std::atof(f[12].c_str()) / tick;
  out->threads = std::atoi(f[17].c_str());
  out->rss_mb = std::atof(f[21].c_str()) * page_mb;
  return !f[21].empty();
}

void read_io(int pid, double* read_bytes, double* write_bytes) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  double v;
  while (in >> key >> v) {
    if (key == "read_bytes:") *read_bytes += v;
    if (key == "write_bytes:") *write_bytes += v;
  }
}

}  // namespace

int SystemSampler::cores() { return host::online_cpus(); }

void SystemSampler::memory(double* total_mb, double* available_mb) {
  const host::MemInfo m = host::meminfo();
  *total_mb = m.total > 0 ? static_cast<double>(m.total) / (1024 * 1024) : 0;
  *available_mb = m.available > 0 ? static_cast<double>(m.available) / (1024 * 1024) : 0;
}

void SystemSampler::set_workers(const std::vector<int>& pids) {
  pids_ = pids;
  last_.clear();
  last_time_ = 0;
}

void SystemSampler::read_groups(std::map<int, Counters>* counters,
                                std::map<int, RankSample>* samples) const {
  std::map<int, int> rank_of_group;
  for (size_t r = 0; r < pids_.size(); ++r) rank_of_group[pids_[r]] = static_cast<int>(r);
  DIR* d = ::opendir("/proc");
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    ProcInfo p;
    if (!read_stat(pid, &p)) continue;
    auto it = rank_of_group.find(p.pgrp);
    if (it == rank_of_group.end()) continue;
    const int rank = it->second;
    Counters& c = (*counters)[rank];
    c.cpu_user_s += p.utime_s;
    c.cpu_system_s += p.stime_s;
    read_io(pid, &c.read_bytes, &c.write_bytes);
    RankSample& rs = (*samples)[rank];
    rs.rank = rank;
    rs.rss_mb += p.rss_mb;
    rs.threads += p.threads;
    rs.processes += 1;
  }
  ::closedir(d);
}

std::vector<SystemSampler::CoreTimes> SystemSampler::read_cores() {
  // "cpuN user nice system idle iowait irq softirq steal ..."
  std::ifstream stat("/proc/stat");
  std::string line;
  std::vector<CoreTimes> cores;
  while (std::getline(stat, line)) {
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || !std::isdigit(line[3])) continue;
    std::istringstream in(line);
    std::string name;
    uint64_t v[8] = {0};
    in >> name;
    for (uint64_t& x : v) in >> x;
    CoreTimes t;
    for (uint64_t x : v) t.total += x;
    t.busy = t.total - v[3] - v[4];
    cores.push_back(t);
  }
  return cores;
}

SystemSample SystemSampler::sample() {
  SystemSample s;
  s.timestamp = unix_now();
  s.cores = cores();
  memory(&s.memory_mb, &s.memory_available_mb);
  std::map<int, Counters> now;
  std::map<int, RankSample> samples;
  read_groups(&now, &samples);
  const double dt = last_time_ > 0 ? s.timestamp - last_time_ : 0;
  for (auto& [rank, rs] : samples) {
    const Counters& c = now[rank];
    auto prev = last_.find(rank);
    if (dt <= 0 || prev == last_.end()) continue;
    const Counters& p = prev->second;
    rs.user_percent = std::max(0.0, (c.cpu_user_s - p.cpu_user_s) / dt * 100);
    rs.system_percent = std::max(0.0, (c.cpu_system_s - p.cpu_system_s) / dt * 100);
    rs.cpu_percent = rs.user_percent + rs.system_percent;
    rs.read_mb_s = std::max(0.0, (c.read_bytes - p.read_bytes) / dt / (1 << 20));
    rs.write_mb_s = std::max(0.0, (c.write_bytes - p.write_bytes) / dt / (1 << 20));
    s.ranks.push_back(rs);
  }
  last_ = std::move(now);
  last_time_ = s.timestamp;
  std::vector<CoreTimes> cores = read_cores();
  if (last_cores_.size() == cores.size()) {
    for (size_t i = 0; i < cores.size(); ++i) {
      const double total = static_cast<double>(cores[i].total - last_cores_[i].total);
      const double busy = static_cast<double>(cores[i].busy - last_cores_[i].busy);
      s.core_busy_percent.push_back(total > 0 ? 100.0 * busy / total : 0.0);
    }
  }
  last_cores_ = std::move(cores);
  return s;
}

namespace {
constexpr const char* kSampleVersion = "heft-sample-2";
constexpr const char* kSampleVersion1 = "heft-sample-1";  // no MEMORY, AVAILABLE
}  // namespace

std::string encode_rank_sample(const SystemSample& s) {
  RankSample r;
  if (!s.ranks.empty()) r = s.ranks.front();
  std::ostringstream out;
  out << std::fixed;  // a timestamp keeps its milliseconds, a rate three decimals
  out.precision(3);
  out << kSampleVersion << ' ' << (s.host.empty() ? "-" : s.host) << ' ' << s.timestamp << ' '
      << s.cores << ' ' << s.memory_mb << ' ' << s.memory_available_mb << ' ' << r.cpu_percent
      << ' ' << r.user_percent << ' ' << r.system_percent << ' ' << r.rss_mb << ' ' << r.read_mb_s
      << ' ' << r.write_mb_s << ' ' << r.threads << ' ' << (s.ranks.empty() ? 0 : r.processes);
  for (double c : s.core_busy_percent) out << ' ' << c;
  return out.str();
}

bool decode_rank_sample(const std::string& text, int rank, SystemSample* out) {
  std::istringstream in(text);
  std::string version;
  SystemSample s;
  RankSample r;
  r.rank = rank;
  if (!(in >> version) || (version != kSampleVersion && version != kSampleVersion1)) return false;
  if (!(in >> s.host >> s.timestamp >> s.cores)) return false;
  if (version == kSampleVersion && !(in >> s.memory_mb >> s.memory_available_mb)) return false;
  if (!(in >> r.cpu_percent >> r.user_percent >> r.system_percent >> r.rss_mb >> r.read_mb_s >>
        r.write_mb_s >> r.threads >> r.processes))
    return false;
  if (s.host == "-") s.host.clear();
  double c;
  while (in >> c) s.core_busy_percent.push_back(c);
  if (!in.eof()) return false;  // a field that is not a number
  if (r.processes > 0) s.ranks.push_back(r);
  *out = std::move(s);
  return true;
}

std::string rank_sample_key(const std::string& job, int rank) {
  return job + "/world/system/" + std::to_string(rank);
}

}  // namespace heft::profile
