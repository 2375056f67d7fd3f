#include "heft/job/launch/placement.h"

#include <sched.h>

#include "heft/error.h"

namespace heft::job {

Bind parse_bind(const std::string& value) {
  if (value.empty() || value == "core") return Bind::kCore;
  if (value == "none") return Bind::kNone;
  throw InvalidArgument("HEFT_BIND: expected core or none, found '" + value + "'");
}

std::vector<std::vector<int>> plan_placement(const std::vector<int>& available, int workers,
                                             Bind bind) {
  std::vector<std::vector<int>> plan(static_cast<size_t>(std::max(workers, 0)));
  const int cpus = static_cast<int>(available.size());
  if (bind == Bind::kNone || workers < 2 || cpus < 2) return plan;
  if (workers > cpus) {
    // Consecutive workers share a CPU, as evenly as the counts allow.
    for (int w = 0; w < workers; ++w)
      plan[w] = {available[static_cast<size_t>(w) * cpus / workers]};
    return plan;
  }
  const int each = cpus / workers;
  for (int w = 0; w < workers; ++w)
    plan[w].assign(available.begin() + w * each, available.begin() + (w + 1) * each);
  return plan;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace heft::job
