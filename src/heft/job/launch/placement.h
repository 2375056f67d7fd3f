// Placement of a machine's workers on its CPUs (HEFT_BIND), as OpenMPI's `--bind-to core
// --map-by slot:PE=n`: when the workers fit the CPUs this launcher may use, each gets its own
// disjoint set of cores ÷ workers CPUs (so torch's OMP_NUM_THREADS threads keep theirs, and
// two ranks never share a core while they spin in a collective). More workers than CPUs are
// packed: consecutive workers share one CPU, as evenly as the counts allow (4 on CPUs 0-1:
// 0, 0, 1, 1), so the ranks that share a core are known and the shared-memory allreduce can
// reduce among them first (docs/comm.md, "Ranks that share a core"). The launcher's own
// affinity is the pool, so `taskset -c 2-5 heft run ...` places inside 2-5.
//
// Not narrowed: a single worker, a pool of one CPU, and HEFT_BIND=none.
#pragma once

#include <string>
#include <vector>

namespace heft::job {

enum class Bind { kNone, kCore };

// HEFT_BIND's value: "core" (the default, also for "") or "none"; throws
// heft::InvalidArgument naming HEFT_BIND otherwise.
Bind parse_bind(const std::string& value);

// The CPUs of each of `workers` workers on a machine whose launcher may use `available`:
// one list per worker, all empty when nothing is narrowed (see the file comment).
std::vector<std::vector<int>> plan_placement(const std::vector<int>& available, int workers,
                                             Bind bind);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpus();

// "0-3,6" for {0,1,2,3,6}; "" for none.
std::string cpu_list(const std::vector<int>& cpus);

}  // namespace heft::job
