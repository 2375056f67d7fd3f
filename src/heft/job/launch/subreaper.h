// No process outlives its job: this process becomes the *subreaper* of its descendants
// (PR_SET_CHILD_SUBREAPER), so a worker's descendant that left the worker's process group or
// session (setsid, setpgid, a daemon's double fork), and so escaped the group kills, is
// reparented here when its parent exits, rather than to init; end_adopted() then ends every
// such child once a start's workers are reaped.
//
// Adopted children are told from heft's own by the registry in process.h (spawned_by_heft).
// Deliberately left out: a descendant whose parent still runs when the sweep happens is
// reparented only once that parent dies (the sweep repeats while any arrive). The job's cgroup
// (job_cgroup.h), where the machine allows one, catches those and what outlives the launcher.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace heft::job {

// Marks this process a subreaper. Returns false when the kernel refuses (then orphans go to
// init, as before).
bool become_subreaper();

// Children of this process that heft did not spawn and that are outside this process's own
// process group: descendants of its workers, reparented here. Reads /proc; never blocks.
std::vector<pid_t> adopted_children();

// Ends every adopted child: SIGTERM to it and its process group, SIGKILL to those left after
// `grace`, each reaped; repeated while more are reparented here (their own children), up to
// 16 rounds. Writes one line to stderr naming how many it ended, prefixed by `log_name`.
// Returns how many processes it ended.
int end_adopted(std::chrono::milliseconds grace, const std::string& log_name);

}  // namespace heft::job
