#include "heft/tune/early_stopping.h"

#include <algorithm>
#include <sstream>

namespace heft::tune {

bool median_stop(const std::vector<double>& running, const std::vector<std::vector<double>>& earlier,
                 const MedianRule& rule, std::string* why) {
  const size_t t = running.size();
  if (t < static_cast<size_t>(std::max(1, rule.min_points))) return false;
  std::vector<double> bests;
  for (const auto& s : earlier)
    if (s.size() >= t) bests.push_back(*std::min_element(s.begin(), s.begin() + static_cast<long>(t)));
  if (bests.size() < static_cast<size_t>(std::max(1, rule.min_trials))) return false;
  std::sort(bests.begin(), bests.end());
  const size_t n = bests.size();
  const double median = n % 2 ? bests[n / 2] : 0.5 * (bests[n / 2 - 1] + bests[n / 2]);
  const double mine = *std::min_element(running.begin(), running.end());
  if (!(mine > median)) return false;
  if (why) {
    std::ostringstream os;
    os << "early stopped: best " << mine << " after " << t << " values, worse than the median "
       << median << " of " << n << " earlier trials";
    *why = os.str();
  }
  return true;
}

}  // namespace heft::tune
