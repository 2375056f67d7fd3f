#include "heft/job/launch/subreaper.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "heft/job/launch/process.h"

namespace heft::job {

namespace {

// The parent pid; -1 when unreadable.
pid_t parent_of(pid_t pid) {
  const std::string ppid = proc_stat_field(pid, 4);
  return ppid.empty() ? -1 : static_cast<pid_t>(std::strtol(ppid.c_str(), nullptr, 10));
}

// Reaps `pid` if it ended; true once it is gone.
bool reap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  return r == pid || (r < 0 && errno == ECHILD);
}

}  // namespace

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0; }

std::vector<pid_t> adopted_children() {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    // Heft's workers lead groups of their own; a descendant of theirs reparented here left
    // its worker's group. A child in this process's own group was forked by the program
    // that embeds the launcher (a test harness), not by a worker: not ours to end.
    if (parent_of(static_cast<pid_t>(pid)) == self && !spawned_by_heft(static_cast<pid_t>(pid)) &&
        ::getpgid(static_cast<pid_t>(pid)) != ::getpgrp())
      out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

int end_adopted(std::chrono::milliseconds grace, const std::string& log_name) {
  int ended = 0;
  for (int round = 0; round < 16; ++round) {
    std::vector<pid_t> left = adopted_children();
    if (left.empty()) break;
    for (pid_t p : left) {
      ::kill(-p, SIGTERM);  // its group too, if it leads one
      ::kill(p, SIGTERM);
    }
    const auto kill_at = std::chrono::steady_clock::now() + grace;
    while (!left.empty()) {
      std::vector<pid_t> still;
      for (pid_t p : left)
        if (!reap(p)) still.push_back(p);
      ended += static_cast<int>(left.size() - still.size());
      left.swap(still);
      if (left.empty()) break;
      if (std::chrono::steady_clock::now() >= kill_at) {
        for (pid_t p : left) {
          ::kill(-p, SIGKILL);
          ::kill(p, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  if (ended > 0)
    std::cerr << log_name << ": ended " << ended << " process" << (ended == 1 ? "" : "es")
              << " a worker left running outside its process group (setsid)" << std::endl;
  return ended;
}

}  // namespace heft::job
