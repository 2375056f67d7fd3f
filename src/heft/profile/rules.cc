// Terms: a rank's *busy* time in a step is the step's time less its communication wait (a
// slow rank makes every other rank wait in the allreduce, so total step times even out
// across ranks while busy times do not); a worker's *utilisation* is its CPU use over the
// cores it may use (Observations::worker_utilisation).
#include "heft/profile/rules.h"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstdio>
#include <map>

#include "heft/error.h"
#include "heft/job/record/job_report.h"
#include "heft/profile/rules_detail.h"

namespace heft::profile {

namespace {

using detail::fmt;
using detail::median;
using detail::percentile;
using detail::rank_text;
using detail::steps_by_rank;
using detail::utilisation_at;

std::vector<RuleFinding> cpu_bottleneck(const job::RuleSpec& r, const Observations& obs) {
  std::vector<RuleFinding> out;
  for (const auto& [rank, steps] : steps_by_rank(obs)) {
    if (static_cast<double>(steps.size()) < r.number("patience")) continue;
    int bottlenecked = 0;
    for (const StepRecord* s : steps) {
      const bool waiting = s->total_ms > 0 && s->data_ms >= r.number("data_threshold") / 100 * s->total_ms;
      if (waiting && utilisation_at(obs, rank, s->timestamp) >= r.number("cpu_threshold"))
        ++bottlenecked;
    }
    const double pct = 100.0 * bottlenecked / static_cast<double>(steps.size());
    if (pct < r.number("threshold")) continue;
    RuleFinding f;
    f.rule = r.rule;
    f.rank = rank;
    f.message = rank_text(obs, rank) + ": " + fmt(pct) + "% of " +
                std::to_string(steps.size()) + " steps waited on data (>= " +
                fmt(r.number("data_threshold"), 0) + "% of the step) while its CPU was >= " +
                fmt(r.number("cpu_threshold"), 0) + "% busy";
    f.evidence = {{"bottlenecked_steps", bottlenecked}, {"steps", steps.size()},
                  {"percent", pct}};
    out.push_back(f);
  }
  return out;
}

std::vector<RuleFinding> load_balancing(const job::RuleSpec& r, const Observations& obs) {
  std::map<int, double> mean;
  for (const auto& [rank, steps] : steps_by_rank(obs)) {
    if (static_cast<double>(steps.size()) < r.number("patience")) continue;
    double sum = 0;
    for (const StepRecord* s : steps) sum += s->busy_ms();
    mean[rank] = sum / static_cast<double>(steps.size());
  }
  if (mean.size() < 2) return {};
  auto [lo, hi] = std::minmax_element(mean.begin(), mean.end(),
                                      [](const auto& a, const auto& b) { return a.second < b.second; });
  if (hi->second <= 0) return {};
  const double diff = (hi->second - lo->second) / hi->second;
  if (diff <= r.number("threshold")) return {};
  RuleFinding f;
  f.rule = r.rule;
  f.rank = hi->first;
  f.message = rank_text(obs, hi->first) + " is the slowest: " + fmt(hi->second) +
              " ms of work a step against " + fmt(lo->second) + " ms on " +
              rank_text(obs, lo->first) + " (" + fmt(100 * diff, 0) + "% apart; threshold " +
              fmt(100 * r.number("threshold"), 0) + "%)";
  nlohmann::json per_rank = nlohmann::json::object();
  for (const auto& [rank, m] : mean) per_rank[std::to_string(rank)] = m;
  f.evidence = {{"mean_busy_ms_by_rank", per_rank}, {"difference", diff}};
  return {f};
}

std::vector<RuleFinding> low_utilization(const job::RuleSpec& r, const Observations& obs) {
  std::vector<double> util;  // the workers' mean utilisation, per sample
  for (const SystemSample& s : obs.system) {
    if (s.ranks.empty()) continue;
    double sum = 0;
    for (const RankSample& x : s.ranks) sum += obs.worker_utilisation(x.cpu_percent, x.rank);
    util.push_back(sum / static_cast<double>(s.ranks.size()));
  }
  if (static_cast<double>(util.size()) < r.number("patience")) return {};
  const size_t window = static_cast<size_t>(std::max(1.0, r.number("window")));
  if (util.size() > window) util.erase(util.begin(), util.end() - static_cast<long>(window));
  const double p95 = percentile(util, 95);
  if (p95 >= r.number("threshold_p95")) return {};
  RuleFinding f;
  f.rule = r.rule;
  f.message = "the workers used " + fmt(p95) + "% of their cores at the 95th percentile of the last " +
              std::to_string(util.size()) + " samples (threshold " +
              fmt(r.number("threshold_p95"), 0) + "%)";
  f.evidence = {{"p95_percent", p95}, {"median_percent", percentile(util, 50)},
                {"samples", util.size()}};
  return {f};
}

std::vector<RuleFinding> step_outlier(const job::RuleSpec& r, const Observations& obs) {
  if (static_cast<double>(obs.steps.size()) < r.number("patience")) return {};
  std::vector<double> busy;
  for (const StepRecord& s : obs.steps) busy.push_back(s.busy_ms());
  const double med = median(busy);
  double mean = 0, var = 0;
  for (double b : busy) mean += b;
  mean /= static_cast<double>(busy.size());
  for (double b : busy) var += (b - mean) * (b - mean);
  const double sigma = std::sqrt(var / static_cast<double>(busy.size()));
  const double limit = std::max(med + r.number("stddev") * sigma, r.number("min_ratio") * med);
  std::vector<RuleFinding> out;
  for (const auto& [rank, steps] : steps_by_rank(obs)) {
    int n = 0;
    double worst = 0;
    int64_t worst_step = 0;
    for (const StepRecord* s : steps) {
      if (s->busy_ms() <= limit || sigma <= 0) continue;
      ++n;
      if (s->busy_ms() > worst) {
        worst = s->busy_ms();
        worst_step = s->step;
      }
    }
    if (static_cast<double>(n) < r.number("n_outliers")) continue;
    RuleFinding f;
    f.rule = r.rule;
    f.rank = rank;
    f.message = rank_text(obs, rank) + ": " + std::to_string(n) + " steps slower than " +
                fmt(limit) + " ms (median " + fmt(med) + " + " + fmt(r.number("stddev"), 0) +
                " x sigma " + fmt(sigma) + ", at least " + fmt(r.number("min_ratio"), 1) +
                " x the median); the slowest, step " + std::to_string(worst_step) + ", took " +
                fmt(worst) + " ms";
    f.evidence = {{"outliers", n}, {"limit_ms", limit}, {"median_ms", med}, {"sigma_ms", sigma},
                  {"slowest_step", worst_step}, {"slowest_ms", worst}};
    out.push_back(f);
  }
  return out;
}

std::vector<RuleFinding> stalled(const job::RuleSpec& r, const Observations& obs) {
  const double quiet = obs.now - std::max(obs.last_activity, obs.started_at);
  if (obs.started_at <= 0 || quiet < r.number("threshold")) return {};
  RuleFinding f;
  f.rule = r.rule;
  f.message = "no new step or metric for " + fmt(quiet) + " s (threshold " +
              fmt(r.number("threshold"), 0) + " s)";
  f.evidence = {{"quiet_s", quiet}, {"last_activity", obs.last_activity}};
  return {f};
}

const std::vector<job::MetricPoint>* series(const Observations& obs, const std::string& name) {
  auto it = obs.metrics.find(name);
  return it == obs.metrics.end() ? nullptr : &it->second;
}

std::vector<RuleFinding> loss_not_decreasing(const job::RuleSpec& r, const Observations& obs) {
  const auto* s = series(obs, r.text("metric"));
  const size_t k = static_cast<size_t>(std::max(1.0, r.number("num_steps")));
  const size_t patience = static_cast<size_t>(std::max(1.0, r.number("patience")));
  if (!s || s->size() < k + patience) return {};
  for (size_t j = 0; j < patience; ++j) {
    const double now = (*s)[s->size() - 1 - j].value, before = (*s)[s->size() - 1 - j - k].value;
    const double drop = before != 0 ? 100.0 * (before - now) / std::abs(before) : 0;
    if (std::isfinite(now) && drop >= r.number("diff_percent")) return {};
  }
  const double now = s->back().value, before = (*s)[s->size() - 1 - k].value;
  RuleFinding f;
  f.rule = r.rule;
  f.message = r.text("metric") + " went from " + fmt(before, 4) + " to " + fmt(now, 4) +
              " over the last " + std::to_string(k) + " points (less than " +
              fmt(r.number("diff_percent"), 2) + "% lower)";
  f.evidence = {{"metric", r.text("metric")}, {"before", before}, {"now", now},
                {"points", s->size()}};
  return {f};
}

std::vector<RuleFinding> overfit(const job::RuleSpec& r, const Observations& obs) {
  const auto* train = series(obs, r.text("training_metric"));
  const auto* val = series(obs, r.text("validation_metric"));
  const size_t patience = static_cast<size_t>(std::max(1.0, r.number("patience")));
  if (!train || !val || val->size() < patience) return {};
  double ratio = 0, t = 0, v = 0;
  for (size_t j = 0; j < patience; ++j) {
    const job::MetricPoint& vp = (*val)[val->size() - 1 - j];
    const job::MetricPoint* tp = nullptr;
    for (const job::MetricPoint& p : *train)
      if (p.timestamp <= vp.timestamp + 1e-9) tp = &p;
    if (!tp || tp->value == 0) return {};
    const double x = (vp.value - tp->value) / std::abs(tp->value);
    if (!(x > r.number("ratio_threshold"))) return {};
    if (j == 0) ratio = x, t = tp->value, v = vp.value;
  }
  RuleFinding f;
  f.rule = r.rule;
  f.message = r.text("validation_metric") + " " + fmt(v, 4) + " is " + fmt(100 * ratio, 0) +
              "% above " + r.text("training_metric") + " " + fmt(t, 4) + " (threshold " +
              fmt(100 * r.number("ratio_threshold"), 0) + "%)";
  f.evidence = {{"training", t}, {"validation", v}, {"ratio", ratio}};
  return {f};
}

}  // namespace

std::vector<RuleFinding> evaluate_rule(const job::RuleSpec& rule, const Observations& obs) {
  std::vector<RuleFinding> out;
  if (rule.rule == "CPUBottleneck") out = cpu_bottleneck(rule, obs);
  else if (rule.rule == "LoadBalancing") out = load_balancing(rule, obs);
  else if (rule.rule == "LowUtilization") out = low_utilization(rule, obs);
  else if (rule.rule == "StepOutlier") out = step_outlier(rule, obs);
  else if (rule.rule == "StalledTrainingRule") out = stalled(rule, obs);
  else if (rule.rule == "LossNotDecreasing") out = loss_not_decreasing(rule, obs);
  else if (rule.rule == "Overfit") out = overfit(rule, obs);
  else if (rule.rule == "IOBottleneck") out = detail::io_bottleneck(rule, obs);
  else if (rule.rule == "BatchSize") out = detail::batch_size(rule, obs);
  else if (rule.rule == "MaxInitializationTime") out = detail::max_initialization_time(rule, obs);
  else if (rule.rule == "OverallSystemUsage") out = detail::overall_system_usage(rule, obs);
  else if (rule.rule == "Dataloader") out = detail::dataloader(rule, obs);
  else throw InvalidArgument("no profiler rule named '" + rule.rule + "'");
  for (RuleFinding& f : out) {
    f.recommendation = recommendation(rule.rule);
    const std::string host = f.rank >= 0 ? detail::host_of(obs, f.rank) : "";
    if (!host.empty()) f.evidence["host"] = host;
  }
  return out;
}

std::string recommendation(const std::string& rule) {
  if (rule == "CPUBottleneck")
    return "Load data ahead of the step (more loader threads, caching, a smaller transform), or "
           "give each worker more cores (fewer processes_per_host).";
  if (rule == "LoadBalancing")
    return "Look at the slow rank's host (other load, fewer cores, a slow disk) and at uneven "
           "shards of data or of the model.";
  if (rule == "LowUtilization")
    return "Raise the batch size or OMP_NUM_THREADS, or run more workers per host.";
  if (rule == "StepOutlier")
    return "Find what the slow steps share (checkpoints, evaluation, garbage collection, another "
           "process on the host); heft logs RANK shows the rank's own lines.";
  if (rule == "StalledTrainingRule")
    return "Run heft diagnose JOB: it names the rank that is behind and the collective the "
           "others wait in.";
  if (rule == "LossNotDecreasing")
    return "Lower the learning rate, check the data and labels, or stop the job early.";
  if (rule == "Overfit")
    return "Add regularisation (weight decay, dropout, augmentation), stop earlier, or get more data.";
  if (rule == "IOBottleneck")
    return "Read the data from a faster place (a local copy, RAM), prefetch it in loader "
           "processes, or store it in larger files.";
  if (rule == "BatchSize")
    return "Raise the batch size (and the learning rate with it), or run fewer, larger workers.";
  if (rule == "MaxInitializationTime")
    return "Look at what runs before the first step (downloads, dataset preprocessing, model "
           "construction, the rendezvous): cache it or move it out of the job.";
  if (rule == "OverallSystemUsage")
    return "Other processes compete for the host's cores: move them, or run fewer workers "
           "(processes_per_host) there.";
  if (rule == "Dataloader")
    return "Set the data loader's num_workers near the cores each worker may use "
           "(cores / processes_per_host).";
  return "";
}

}  // namespace heft::profile
