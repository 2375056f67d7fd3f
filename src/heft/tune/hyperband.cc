#include "heft/tune/hyperband.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "heft/error.h"

namespace heft::tune {

Hyperband::Hyperband(int min_resource, int max_resource, int eta) : eta_(eta) {
  if (min_resource < 1 || max_resource < min_resource)
    throw InvalidArgument("hyperband: expected 1 <= min_resource <= max_resource, found " +
                          std::to_string(min_resource) + " and " + std::to_string(max_resource));
  if (eta < 2)
    throw InvalidArgument("hyperband.reduction_factor: expected at least 2, found " + std::to_string(eta));
  for (long r = min_resource; r <= max_resource; r *= eta) rungs_.push_back(static_cast<int>(r));
}

bool Hyperband::should_stop(const std::string& trial, const std::vector<double>& series,
                            std::string* why) {
  size_t& next = reached_[trial];
  while (next < rungs_.size() && series.size() >= static_cast<size_t>(rungs_[next])) {
    const int r = rungs_[next];
    const double score = *std::min_element(series.begin(), series.begin() + r);
    std::map<std::string, double>& earlier = scores_[static_cast<int>(next)];
    bool stop = false;
    if (!earlier.empty()) {
      std::vector<double> sorted;
      for (const auto& [name, s] : earlier) sorted.push_back(s);
      std::sort(sorted.begin(), sorted.end());
      // The best 1/eta of the earlier scores and this one: this one goes on if at most
      // ceil((n + 1) / eta) - 1 earlier scores beat it.
      const size_t keep = static_cast<size_t>(std::ceil(static_cast<double>(sorted.size() + 1) / eta_));
      const size_t better = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), score) - sorted.begin());
      stop = better >= keep;
    }
    earlier[trial] = score;
    ++next;
    if (stop) {
      if (why) {
        std::ostringstream os;
        os << "stopped at rung " << r << " (" << earlier.size() << " trials there): outside the best 1/"
           << eta_;
        *why = os.str();
      }
      return true;
    }
  }
  return false;
}

void Hyperband::mark_failed(const std::string& trial) {
  for (auto& [rung, scores] : scores_)
    if (auto it = scores.find(trial); it != scores.end()) it->second = std::numeric_limits<double>::infinity();
}

}  // namespace heft::tune
