#include "heft/job/launch/job_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>
#include <vector>

#include "heft/error.h"
#include "heft/job/launch/process.h"

namespace heft::job {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Where this process's cgroup v2 is: the cgroup2 mount plus its path in /proc/self/cgroup;
// empty when there is none.
std::string own_cgroup_folder() {
  std::string mount;
  std::istringstream info(read_text("/proc/self/mountinfo"));
  for (std::string line; std::getline(info, line);) {
    // id parent major:minor root mount-point options [optional...] - fstype source super
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream fields(line.substr(0, dash));
    std::string skip, root, point;
    fields >> skip >> skip >> skip >> root >> point;
    if (root == "/") {
      mount = point;
      break;
    }
  }
  if (mount.empty()) return "";
  std::istringstream cg(read_text("/proc/self/cgroup"));
  for (std::string line; std::getline(cg, line);)
    if (line.rfind("0::", 0) == 0) {
      const std::string path = line.substr(3);
      return path == "/" ? mount : mount + path;
    }
  return "";
}

// The start time of `pid` (clock ticks since boot), "" when it does not run.
std::string start_time(pid_t pid) { return proc_stat_field(pid, 22); }

std::vector<pid_t> procs_of(const std::string& folder) {
  std::vector<pid_t> pids;
  std::istringstream in(read_text(folder + "/cgroup.procs"));
  for (long pid; in >> pid;) pids.push_back(static_cast<pid_t>(pid));
  return pids;
}

// Kills every member of `folder` through `kill_fd` and waits up to `wait` until it is empty,
// reaping members that became this process's children (reparented to a subreaper), then
// removes it. Returns how many members there were.
int kill_and_remove(const std::string& folder, int kill_fd, std::chrono::milliseconds wait) {
  std::vector<pid_t> members = procs_of(folder);
  const int found = static_cast<int>(members.size());
  if (found > 0 && kill_fd >= 0) {
    ssize_t w = ::write(kill_fd, "1", 1);
    (void)w;  // checked below: the members are gone or not
  }
  const auto deadline = Clock::now() + wait;
  while (!members.empty() && Clock::now() < deadline) {
    for (pid_t p : members) ::waitpid(p, nullptr, WNOHANG);  // ECHILD where not ours
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    members = procs_of(folder);
  }
  ::rmdir(folder.c_str());
  return found;
}

std::atomic<int> next_group{0};

}  // namespace

std::unique_ptr<JobCgroup> JobCgroup::create(std::string* why_not) {
  const std::string base = own_cgroup_folder();
  if (base.empty()) {
    *why_not = "no cgroup v2 mount";
    return nullptr;
  }
  const std::string path = base + "/heft-" + std::to_string(::getpid()) + "-" + start_time(::getpid()) + "-" +
                           std::to_string(next_group++);
  if (::mkdir(path.c_str(), 0755) != 0) {
    *why_not = "cannot make " + path + ": " + errno_string(errno);
    return nullptr;
  }
  const int procs = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  const int kill = ::open((path + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (procs < 0 || kill < 0) {
    *why_not = "cannot open " + path + (procs < 0 ? "/cgroup.procs" : "/cgroup.kill (a kernel before 5.14)") +
               ": " + errno_string(errno);
    if (procs >= 0) ::close(procs);
    if (kill >= 0) ::close(kill);
    ::rmdir(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<JobCgroup>(new JobCgroup(path, procs, kill));
}

JobCgroup::JobCgroup(std::string path, int procs_fd, int kill_fd)
    : path_(std::move(path)), procs_fd_(procs_fd), kill_fd_(kill_fd) {}

JobCgroup::~JobCgroup() {
  kill_and_remove(path_, kill_fd_, std::chrono::seconds(2));
  ::close(procs_fd_);
  ::close(kill_fd_);
}

int JobCgroup::end(std::chrono::milliseconds wait, const std::string& log_name) {
  const int n = kill_and_remove(path_, kill_fd_, wait);
  if (n > 0)
    std::cerr << log_name << ": ended " << n << " process" << (n == 1 ? "" : "es")
              << " left in the job's cgroup" << std::endl;
  return n;
}

int end_stale_cgroups(const std::string& log_name, const std::string& folder) {
  const std::string base = folder.empty() ? own_cgroup_folder() : folder;
  if (base.empty()) return 0;
  DIR* d = ::opendir(base.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    // heft-<pid>-<start time>-<n>
    std::istringstream name(e->d_name);
    std::string prefix, pid, start;
    if (!std::getline(name, prefix, '-') || prefix != "heft" || !std::getline(name, pid, '-') ||
        !std::getline(name, start, '-') || pid.empty() || pid.size() > 9 ||
        pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (start_time(static_cast<pid_t>(std::stol(pid))) != start) stale.push_back(base + "/" + e->d_name);
  }
  ::closedir(d);
  // A guard at work (its launcher SIGKILLed just now, maybe by a test beside us) empties its
  // group within milliseconds: let it, rather than report its processes as ours to end.
  const auto settle = Clock::now() + std::chrono::seconds(1);
  for (const std::string& group : stale)
    while (!procs_of(group).empty() && Clock::now() < settle)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  int ended = 0;
  for (const std::string& group : stale) {
    const int kill = ::open((group + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
    ended += kill_and_remove(group, kill, std::chrono::seconds(2));
    if (kill >= 0) ::close(kill);
  }
  if (ended > 0)
    std::cerr << log_name << ": ended " << ended << " process" << (ended == 1 ? "" : "es")
              << " left by a heft launcher that is gone" << std::endl;
  return ended;
}

}  // namespace heft::job
