#include "heft/profile/observations.h"

#include <algorithm>
#include <sstream>

namespace heft::profile {

bool parse_step_line(const std::string& line, int rank, StepRecord* out) {
  std::istringstream in(line);
  StepRecord r;
  r.rank = rank;
  if (!(in >> r.step >> r.timestamp >> r.total_ms >> r.data_ms >> r.forward_ms >> r.backward_ms >>
        r.communication_ms >> r.optimizer_ms))
    return false;
  *out = r;
  return true;
}

double Observations::worker_utilisation(double cpu_percent) const {
  const double share = static_cast<double>(std::max(1, cores)) / std::max(1, workers_here);
  return cpu_percent / share;
}

double Observations::cores_of(int rank) const {
  const double here = static_cast<double>(std::max(1, cores)) / std::max(1, workers_here);
  const auto h = host_of_rank.find(rank);
  if (h == host_of_rank.end()) return here;
  const auto it = hosts.find(h->second);
  if (it == hosts.end() || it->second.cores <= 0) return here;
  return static_cast<double>(it->second.cores) /
         static_cast<double>(std::max<size_t>(1, it->second.ranks.size()));
}

double Observations::memory_of(int rank) const {
  const double here = std::max(0.0, memory_mb) / std::max(1, workers_here);
  const auto h = host_of_rank.find(rank);
  if (h == host_of_rank.end()) return here;
  const auto it = hosts.find(h->second);
  if (it == hosts.end() || it->second.memory_mb <= 0) return here;
  return it->second.memory_mb / static_cast<double>(std::max<size_t>(1, it->second.ranks.size()));
}

double Observations::worker_utilisation(double cpu_percent, int rank) const {
  return cpu_percent / cores_of(rank);
}

}  // namespace heft::profile
