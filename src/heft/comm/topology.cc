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

}  // namespace heft::comm
