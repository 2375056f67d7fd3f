// A guard against orphans of a launcher that dies without stopping its workers (SIGKILL, the
// kernel's out-of-memory killer). PR_SET_PDEATHSIG (process.h) kills each worker itself with
// its launcher, but not what the worker started: a shell's child, a Python script's
// subprocesses. The guard is a small process forked by the launcher that holds the read end
// of a pipe from it: at EOF without the launcher's goodbye (the launcher died), it sends
// SIGKILL to every process group it was told of, so whatever still runs in a worker's group
// is gone within milliseconds of its launcher.
//
// Given the job's cgroup (job_cgroup.h), the guard also writes its cgroup.kill, which ends what
// left the workers' groups too (setsid, setpgid, daemons).
//
// Deliberately left out: without a cgroup, processes that left their worker's group, and
// workers on other hosts (the worker shim watches those: worker_shim.h).
#pragma once

#include <sys/types.h>

namespace heft::job {

class OrphanGuard {
 public:
  // Forks the guard (it closes every inherited descriptor but its pipe and `cgroup_kill_fd`,
  // ignores the terminal's signals and lives until told goodbye or the launcher is gone).
  // `cgroup_kill_fd`: an open cgroup.kill the guard writes "1" to should the launcher die; -1:
  // none. Throws heft::IoError when the pipe or the fork fails.
  explicit OrphanGuard(int cgroup_kill_fd = -1);
  // The launcher's goodbye: the guard exits without killing anything, and is reaped.
  ~OrphanGuard();
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  // The guard kills process group `pgid` should the launcher die (at most kMaxGroups).
  void watch(pid_t pgid);

  pid_t pid() const { return pid_; }

  static constexpr int kMaxGroups = 4096;

 private:
  pid_t pid_ = -1;
  int fd_ = -1;  // the write end
};

}  // namespace heft::job
