#include "heft/tune/divergence.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <sstream>

#include "heft/job/job_db.h"

namespace heft::tune {

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
  if (loss.size() >= 2 && loss.back() > rule.loss_above_first * loss.front()) {
    why << loss_name << " ended at " << loss.back() << ", above ";
    if (rule.loss_above_first != 1.0) why << rule.loss_above_first << " x ";
    why << "its first value " << loss.front();
    return why.str();
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
  job::Result<job::JobRecord> record = db.find_job(job);
  if (!record.ok() || metric.empty()) return out;
  const auto points = db.metrics(record.value().id, metric);
  int rank = INT_MAX;
  for (const auto& p : points) rank = std::min(rank, p.rank);
  for (const auto& p : points)
    if (p.rank == rank) out.push_back(p.value);
  return out;
}

}  // namespace heft::tune
