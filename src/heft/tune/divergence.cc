#include "heft/tune/divergence.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <sstream>

#include "heft/job/record/job_db.h"

namespace heft::tune {

namespace {

template <class It>
double median(It begin, It end) {
  std::vector<double> v(begin, end);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::string resolve_loss_metric(const DivergenceRule& rule, const std::vector<std::string>& defined,
                                const std::string& objective, bool maximize) {
  if (rule.loss_metric == "none") return "";
  if (!rule.loss_metric.empty()) return rule.loss_metric;
  if (std::find(defined.begin(), defined.end(), "train:loss") != defined.end()) return "train:loss";
  return maximize ? "" : objective;
}

std::string divergence_reason(const DivergenceRule& rule, bool maximize,
                              const std::string& objective_name, std::optional<double> objective,
                              const std::string& loss_name, const std::vector<double>& loss) {
  std::ostringstream why;
  if (objective && !std::isfinite(*objective)) {
    why << objective_name << " is " << *objective;
    return why.str();
  }
  for (size_t i = 0; i < loss.size(); ++i)
    if (!std::isfinite(loss[i])) {
      why << loss_name << " became " << loss[i] << " (value " << i + 1 << " of " << loss.size() << ")";
      return why.str();
    }
  if (loss.size() >= 2) {
    const size_t k = std::max<size_t>(1, loss.size() / 4);
    const double first = median(loss.begin(), loss.begin() + static_cast<long>(k));
    const double last = median(loss.end() - static_cast<long>(k), loss.end());
    if (last > rule.loss_above_first * first) {
      why << loss_name << " ended at " << last << ", above ";
      if (rule.loss_above_first != 1.0) why << rule.loss_above_first << " x ";
      why << "its start " << first;
      if (k > 1) why << " (medians of its first and last " << k << " of " << loss.size() << " values)";
      return why.str();
    }
  }
  if (objective && rule.objective_worse_than &&
      (maximize ? *objective < *rule.objective_worse_than : *objective > *rule.objective_worse_than)) {
    why << objective_name << " " << *objective << " is worse than diverged_if.objective_worse_than "
        << *rule.objective_worse_than;
    return why.str();
  }
  return "";
}

std::vector<double> metric_values(job::JobDb& db, const std::string& job, const std::string& metric) {
  std::vector<double> out;
  heft::Result<job::JobRecord> record = db.find_job(job);
  if (!record.ok() || metric.empty()) return out;
  const auto points = db.metrics(record.value().id, metric);
  int rank = INT_MAX;
  for (const auto& p : points) rank = std::min(rank, p.rank);
  for (const auto& p : points)
    if (p.rank == rank) out.push_back(p.value);
  return out;
}

}  // namespace heft::tune
