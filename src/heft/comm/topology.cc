#include "heft/comm/topology.h"

namespace heft::comm {

Topology Topology::from_names(const std::vector<std::string>& names, int rank) {
  Topology t;
  std::vector<std::string> seen;
  for (size_t r = 0; r < names.size(); ++r) {
    size_t h = 0;
    while (h < seen.size() && seen[h] != names[r]) ++h;
    if (h == seen.size()) {
      seen.push_back(names[r]);
      t.ranks_of_host.emplace_back();
    }
    t.host_of_rank.push_back(static_cast<int>(h));
    t.ranks_of_host[h].push_back(static_cast<int>(r));
  }
  t.host = t.host_of_rank[rank];
  const std::vector<int>& mine = t.ranks_of_host[t.host];
  while (mine[t.local_rank] != rank) ++t.local_rank;
  return t;
}

bool Topology::uniform() const {
  for (const auto& h : ranks_of_host)
    if (h.size() != ranks_of_host[0].size()) return false;
  return true;
}

bool Topology::any_shared_host() const {
  for (const auto& h : ranks_of_host)
    if (h.size() > 1) return true;
  return false;
}

std::vector<int> Topology::leaders() const {
  std::vector<int> out;
  for (const auto& h : ranks_of_host) out.push_back(h[0]);
  return out;
}

std::vector<int> Topology::column(int i) const {
  std::vector<int> out;
  for (const auto& h : ranks_of_host) out.push_back(h[i]);
  return out;
}

std::vector<std::vector<int>> core_groups(const std::vector<int>& single_cpus, int group_size) {
  const int n = static_cast<int>(single_cpus.size());
  std::vector<std::vector<int>> groups;
  if (group_size > 0) {
    for (int r = 0; r < n; ++r) {
      if (r % group_size == 0) groups.emplace_back();
      groups.back().push_back(r);
    }
  } else if (group_size < 0) {
    std::vector<int> cpu_of_group;
    for (int r = 0; r < n; ++r) {
      if (single_cpus[r] < 0) return {};
      size_t g = 0;
      while (g < cpu_of_group.size() && cpu_of_group[g] != single_cpus[r]) ++g;
      if (g == cpu_of_group.size()) {
        cpu_of_group.push_back(single_cpus[r]);
        groups.emplace_back();
      }
      groups[g].push_back(r);
    }
  }
  bool shared = false;
  for (const auto& g : groups) shared = shared || g.size() > 1;
  if (groups.size() < 2 || !shared) return {};
  return groups;
}

}  // namespace heft::comm
