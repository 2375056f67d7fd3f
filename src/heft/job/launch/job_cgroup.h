// A cgroup (v2) per start of a local job, where the machine lets heft make one: every worker
// joins it before execve (Process::spawn's cgroup_procs_fd), so every descendant is in it too,
// whatever process group or session it moves to. Once the workers are reaped, end() writes
// cgroup.kill (the kernel ends every member at once, forks in flight included) and removes
// the group. Should the launcher itself be SIGKILLed, its orphan guard writes cgroup.kill
// (orphan_guard.h), and the next local launcher in the same cgroup ends and removes any heft
// cgroup whose launcher is gone (end_stale_cgroups).
//
// Where: a child of this process's own cgroup ("0::/path" in /proc/self/cgroup) under the
// cgroup2 mount (/proc/self/mountinfo), named heft-<launcher pid>-<its start time>-<n>. No
// controller is enabled, so nothing is limited; the group only collects. Where there is no
// cgroup2 mount, or the folder is not writable (an unprivileged user without a delegated
// cgroup), create() returns null with the reason, and the subreaper (subreaper.h) does alone.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace heft::job {

class JobCgroup {
 public:
  // A new, empty cgroup, or null with `*why_not` set.
  static std::unique_ptr<JobCgroup> create(std::string* why_not);
  // Ends what is left (as end()) and removes the folder.
  ~JobCgroup();
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  const std::string& path() const { return path_; }
  // Open, close-on-exec, for writing: a child writes "0" to procs_fd() to join; "1" to
  // kill_fd() ends every member.
  int procs_fd() const { return procs_fd_; }
  int kill_fd() const { return kill_fd_; }

  // Ends every member (cgroup.kill) and waits up to `wait` until the group is empty; writes
  // one line to stderr, prefixed by `log_name`, when it ended any. Returns how many it found.
  int end(std::chrono::milliseconds wait, const std::string& log_name);

 private:
  JobCgroup(std::string path, int procs_fd, int kill_fd);
  std::string path_;
  int procs_fd_ = -1;
  int kill_fd_ = -1;
};

// Ends and removes every heft cgroup in `folder` ("": beside where this process would make its
// own) whose launcher is no longer running (a launcher that was SIGKILLed). The orphan guard of
// a launcher killed a moment ago is ending its group itself: a stale group still running is
// given up to a second to empty before it is ended here, so only what no guard ended is.
// Returns how many processes it ended; a line on stderr, prefixed by `log_name`, when any.
int end_stale_cgroups(const std::string& log_name, const std::string& folder = "");

}  // namespace heft::job
