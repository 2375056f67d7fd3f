// The host's share of a step that a one-rank profile cannot see, measured on the job's own
// ranks as it starts (the layout search's SearchOptions::host_* terms, layout_search.h).
// Torch-free: the work is the caller's (heft-train gives torch probes shaped as its model).
//
// Terms:
//  - inflation: a unit of work's CPU seconds with every rank of the world running it at once
//    over its CPU seconds on world rank 0 alone (the others asleep in a barrier): ranks
//    that outnumber the cores evict each other's caches at every time slice and, on memory-
//    bound work (an optimizer step, a gradient norm in double), share the memory bandwidth.
//    CPU seconds, not wall: the search already divides the cores among the busy ranks.
//  - synchronisation delay: groups of g consecutive ranks (color rank / g, as comm_measure's)
//    run `rounds` x (the work, then a one-float all-reduce of the group), and again the same
//    work with no all-reduce between the rounds; each run starts and ends with a world
//    barrier, timed on world rank 0. (with - without) / rounds less the table's price of the
//    one-float all-reduce is what a synchronisation point costs beyond the collective itself:
//    with ranks outnumbering cores, the peer a rank waits for is often descheduled, and the
//    rank a collective wakes waits for a core. comm_measure cannot see it: each of its calls
//    starts from a barrier, every rank already running.
// Medians of `rounds` timed calls after `warmup`; world rank 0's figures, broadcast, so every
// rank gets the same terms.
//
// Deliberately left out: placement of the groups (consecutive ranks only), the load other
// jobs add while the run goes on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/parallel/layout/layout_search.h"

namespace heft::parallel::layout {

struct HostProbeOptions {
  int warmup = 1;   // untimed calls of the work before each timed series
  int rounds = 8;   // timed calls (inflation: the median; sync: per run)
  // Group sizes of the synchronisation probe; empty: every divisor of the world above 1.
  std::vector<int> groups;
};

// Work's median CPU seconds per call on every rank at once over world rank 0's alone (>= 1
// is not forced: a ratio below 1 is reported as measured). Collective over `world`: every
// rank passes the same kind of work. A world of 1 returns 1 without running anything.
// Throws heft::InvalidArgument naming the option for rounds < 1 or warmup < 0.
double measure_inflation(comm::Communicator& world, const std::function<void()>& work,
                         const HostProbeOptions& options = {});

// Seconds a synchronisation point costs beyond its collective, per group size (see the file
// comment), as {group, seconds} entries (at least 0); `comm` prices the one-float all-reduce
// the probe runs. Collective over `world`. A world of 1 returns none. Throws
// heft::InvalidArgument naming the option for rounds < 1, warmup < 0 or a group size that
// does not divide the world.
std::vector<SyncDelay> measure_sync_delay(comm::Communicator& world, const std::function<void()>& work,
                                          const CommTable& comm, const HostProbeOptions& options = {});

// One line: "compute x1.08, step x1.35, synchronisation 0.21 ms (g 2), 0.35 ms (g 4)".
std::string describe_host_terms(double compute_inflation, double step_inflation,
                                const std::vector<SyncDelay>& sync);

}  // namespace heft::parallel::layout
