// Which ranks of a group share a host, learned at set-up from each rank's host name
// (CommunicatorOptions::host: the launcher's HEFT_HOST, e.g. the simulated "algo-2", else
// the machine's hostname). Hosts are numbered by their lowest rank; ranks within a host keep
// group order. Example, 7 ranks on hosts a a a b b b b: hosts() = 2, ranks_of_host =
// {{0,1,2},{3,4,5,6}}, leaders = {0,3}, uniform() = false.
#pragma once

#include <string>
#include <vector>

namespace heft::comm {

struct Topology {
  std::vector<int> host_of_rank;                 // host index of each rank
  std::vector<std::vector<int>> ranks_of_host;   // ranks of each host, ascending
  int host = 0;                                  // this rank's host
  int local_rank = 0;                            // index of this rank within its host

  // names[r] = host name of rank r.
  static Topology from_names(const std::vector<std::string>& names, int rank);

  int hosts() const { return static_cast<int>(ranks_of_host.size()); }
  const std::vector<int>& local() const { return ranks_of_host[host]; }
  int local_size() const { return static_cast<int>(local().size()); }
  // Every host has the same number of ranks.
  bool uniform() const;
  // Some host has more than one rank (shared memory has something to do).
  bool any_shared_host() const;
  // The lowest rank of each host, by host.
  std::vector<int> leaders() const;
  // The rank with local index i on each host, by host (uniform topologies only).
  std::vector<int> column(int i) const;
};

// The ranks of a host that share a core (CommunicatorOptions::shm_core_group), as groups of
// local ranks, ascending, the first of each its core's leader. group_size > 0: consecutive
// local ranks in groups of that many; -1: by the one CPU each rank is bound to
// (single_cpus[i], -1 where local rank i may run on several: then no groups), in the order
// the CPUs first appear; 0: none. Empty where grouping has nothing to do: fewer than two
// groups, or no group with two ranks.
std::vector<std::vector<int>> core_groups(const std::vector<int>& single_cpus, int group_size);

}  // namespace heft::comm
