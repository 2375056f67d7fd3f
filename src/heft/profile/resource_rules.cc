// The rules on the workers' resources beside CPUBottleneck and LowUtilization (rules.h lists
// them; job/spec/rule_spec.cc has their parameters), and the statistics all rules share.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>

#include "heft/job/record/job_report.h"
#include "heft/profile/rules_detail.h"

namespace heft::profile::detail {

std::string fmt(double v, int digits) { return job::decimal_text(v, digits); }

std::map<int, std::vector<const StepRecord*>> steps_by_rank(const Observations& obs) {
  std::map<int, std::vector<const StepRecord*>> out;
  for (const StepRecord& s : obs.steps) out[s.rank].push_back(&s);
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

namespace {

// The utilisation of `rank` in `s`; -1 when `s` does not hold it.
double utilisation_in(const Observations& obs, const SystemSample& s, int rank) {
  for (const RankSample& r : s.ranks)
    if (r.rank == rank) return obs.worker_utilisation(r.cpu_percent, rank);
  return -1;
}

}  // namespace

double utilisation_at(const Observations& obs, int rank, double t) {
  // Samples are in time order: from the first at or after t, outwards both ways to the
  // nearest that holds the rank, at most kNearby samples each way (a rank's shim publishes
  // as often as the profiler reads: a gap of one or two samples, not more).
  constexpr long kNearby = 8;
  const auto& all = obs.system;
  const auto it = std::lower_bound(all.begin(), all.end(), t,
                                   [](const SystemSample& s, double x) { return s.timestamp < x; });
  const long start = it - all.begin();
  long after = start, before = start - 1;
  const long n = std::min(static_cast<long>(all.size()), start + kNearby);
  const long first = std::max(0L, start - kNearby);
  while (before >= first || after < n) {
    const bool take_before =
        after >= n || (before >= first && t - all[before].timestamp < all[after].timestamp - t);
    const long i = take_before ? before-- : after++;
    const double u = utilisation_in(obs, all[i], rank);
    if (u >= 0) return u;
  }
  return -1;
}

std::string host_of(const Observations& obs, int rank) {
  const auto it = obs.host_of_rank.find(rank);
  return it == obs.host_of_rank.end() ? "" : it->second;
}

std::string rank_text(const Observations& obs, int rank) {
  const std::string host = host_of(obs, rank);
  return "rank " + std::to_string(rank) + (host.empty() ? "" : " on " + host);
}

std::vector<const SystemSample*> last_samples(const Observations& obs, double window) {
  const size_t n = static_cast<size_t>(std::max(1.0, window));
  std::vector<const SystemSample*> out;
  const size_t first = obs.system.size() > n ? obs.system.size() - n : 0;
  for (size_t i = first; i < obs.system.size(); ++i) out.push_back(&obs.system[i]);
  return out;
}

namespace {

RuleFinding finding(const job::RuleSpec& r, int rank, std::string message, nlohmann::json evidence) {
  RuleFinding f;
  f.rule = r.rule;
  f.rank = rank;
  f.message = std::move(message);
  f.evidence = std::move(evidence);
  return f;
}

// Per rank: its samples in the window (cpu utilisation, RSS MB, loader processes, read MB/s).
struct RankSeries {
  std::vector<double> utilisation, rss_mb, loaders, read_mb_s;
};

std::map<int, RankSeries> rank_series(const Observations& obs, double window) {
  std::map<int, RankSeries> out;
  for (const SystemSample* s : last_samples(obs, window))
    for (const RankSample& x : s->ranks) {
      RankSeries& r = out[x.rank];
      r.utilisation.push_back(obs.worker_utilisation(x.cpu_percent, x.rank));
      r.rss_mb.push_back(x.rss_mb);
      r.loaders.push_back(std::max(0, x.processes - 1));
      r.read_mb_s.push_back(x.read_mb_s);
    }
  return out;
}

double data_share(const StepRecord& s) { return s.total_ms > 0 ? 100 * s.data_ms / s.total_ms : 0; }

}  // namespace

std::vector<RuleFinding> io_bottleneck(const job::RuleSpec& r, const Observations& obs) {
  std::vector<RuleFinding> out;
  const std::map<int, RankSeries> series = rank_series(obs, static_cast<double>(obs.system.size()));
  for (const auto& [rank, steps] : steps_by_rank(obs)) {
    if (static_cast<double>(steps.size()) < r.number("patience")) continue;
    int waiting = 0;
    for (const StepRecord* s : steps) {
      const double u = utilisation_at(obs, rank, s->timestamp);
      if (data_share(*s) >= r.number("io_threshold") && u >= 0 && u < r.number("cpu_threshold"))
        ++waiting;
    }
    const double pct = 100.0 * waiting / static_cast<double>(steps.size());
    if (pct < r.number("threshold")) continue;
    auto it = series.find(rank);
    const double read = it == series.end() ? 0 : median(it->second.read_mb_s);
    out.push_back(finding(
        r, rank,
        rank_text(obs, rank) + ": " + fmt(pct) + "% of " + std::to_string(steps.size()) +
            " steps waited on data (>= " + fmt(r.number("io_threshold"), 0) +
            "% of the step) while its CPU was below " + fmt(r.number("cpu_threshold"), 0) +
            "% (reading " + fmt(read) + " MB/s at the median)",
        {{"waiting_steps", waiting}, {"steps", steps.size()}, {"percent", pct},
         {"read_mb_s_median", read}}));
  }
  return out;
}

std::vector<RuleFinding> batch_size(const job::RuleSpec& r, const Observations& obs) {
  if (static_cast<double>(obs.system.size()) < r.number("patience")) return {};
  std::vector<RuleFinding> out;
  for (const auto& [rank, s] : rank_series(obs, r.number("window"))) {
    const double share_mb = obs.memory_of(rank);  // of the rank's own host
    if (share_mb <= 0) continue;
    const double cpu = percentile(s.utilisation, 95);
    const double mem = 100 * percentile(s.rss_mb, 95) / share_mb;
    if (cpu >= r.number("cpu_threshold_p95") || mem >= r.number("memory_threshold_p95")) continue;
    out.push_back(finding(
        r, rank,
        rank_text(obs, rank) + " used " + fmt(cpu) + "% of its cores and " + fmt(mem) +
            "% of its share of the host's memory (" + fmt(share_mb, 0) +
            " MB) at the 95th percentile (thresholds " + fmt(r.number("cpu_threshold_p95"), 0) +
            "% and " + fmt(r.number("memory_threshold_p95"), 0) + "%)",
        {{"cpu_p95_percent", cpu}, {"memory_p95_percent", mem}, {"memory_share_mb", share_mb},
         {"samples", s.utilisation.size()}}));
  }
  return out;
}

std::vector<RuleFinding> max_initialization_time(const job::RuleSpec& r, const Observations& obs) {
  if (obs.started_at <= 0) return {};
  double first = obs.first_step_at;
  if (first <= 0)
    for (const StepRecord& s : obs.steps)
      if (s.timestamp >= obs.started_at && (first <= 0 || s.timestamp < first)) first = s.timestamp;
  const double waited = (first > 0 ? first : obs.now) - obs.started_at;
  if (waited <= r.number("threshold_s")) return {};
  const std::string what = first > 0 ? "the first step ended " + fmt(waited) + " s after the start"
                                     : "no step yet, " + fmt(waited) + " s after the start";
  return {finding(r, -1, what + " (threshold " + fmt(r.number("threshold_s"), 0) + " s)",
                  {{"initialization_s", waited}, {"first_step", first > 0}})};
}

namespace {

// OverallSystemUsage on one host's samples: the workers counted are the ranks `mine` says
// run there. Nothing when fewer than `patience` samples have the host's cores.
std::vector<RuleFinding> host_usage(const job::RuleSpec& r, const std::vector<const SystemSample*>& samples,
                                    const std::function<bool(int)>& mine, const std::string& host) {
  std::vector<double> busy_share, other;
  for (const SystemSample* s : samples) {
    if (s->core_busy_percent.empty()) continue;
    double busy = 0, workers = 0;
    for (double c : s->core_busy_percent) busy += c;
    busy /= static_cast<double>(s->core_busy_percent.size());
    for (const RankSample& x : s->ranks)
      if (mine(x.rank)) workers += x.cpu_percent;
    workers /= static_cast<double>(s->core_busy_percent.size());
    busy_share.push_back(busy);
    other.push_back(std::max(0.0, busy - workers));
  }
  if (static_cast<double>(busy_share.size()) < r.number("patience")) return {};
  const double p95 = percentile(busy_share, 95), others = median(other);
  if (p95 < r.number("threshold_p95") || others < r.number("other_threshold")) return {};
  nlohmann::json evidence = {{"host_p95_percent", p95}, {"other_median_percent", others},
                             {"samples", busy_share.size()}};
  if (!host.empty()) evidence["host"] = host;
  return {finding(r, -1,
                  (host.empty() ? "the host's" : "host " + host + "'s") + " cores were " + fmt(p95) +
                      "% busy at the 95th percentile, " + fmt(others) +
                      "% of them with processes other than the workers (median; thresholds " +
                      fmt(r.number("threshold_p95"), 0) + "% and " +
                      fmt(r.number("other_threshold"), 0) + "%)",
                  std::move(evidence))};
}

}  // namespace

std::vector<RuleFinding> overall_system_usage(const job::RuleSpec& r, const Observations& obs) {
  // This machine, with its own workers (a group only on other hosts has none: skipped).
  auto here = [&obs](int rank) { return host_of(obs, rank).empty(); };
  bool any_here = false;
  for (const SystemSample& s : obs.system)
    for (const RankSample& x : s.ranks) any_here = any_here || here(x.rank);
  std::vector<RuleFinding> out;
  if (any_here) out = host_usage(r, last_samples(obs, r.number("window")), here, "");
  // Every other host, from its ranks' shims.
  for (const auto& [name, h] : obs.hosts) {
    if (name.empty() || h.samples.empty()) continue;
    const size_t n = static_cast<size_t>(std::max(1.0, r.number("window")));
    std::vector<const SystemSample*> window;
    for (size_t i = h.samples.size() > n ? h.samples.size() - n : 0; i < h.samples.size(); ++i)
      window.push_back(&h.samples[i]);
    auto there = [&obs, host = name](int rank) { return host_of(obs, rank) == host; };
    for (RuleFinding& f : host_usage(r, window, there, name)) out.push_back(std::move(f));
  }
  return out;
}

std::vector<RuleFinding> dataloader(const job::RuleSpec& r, const Observations& obs) {
  if (static_cast<double>(obs.system.size()) < r.number("patience")) return {};
  const auto steps = steps_by_rank(obs);
  std::vector<RuleFinding> out;
  for (const auto& [rank, s] : rank_series(obs, static_cast<double>(obs.system.size()))) {
    const double cores = obs.cores_of(rank);  // of the rank's own host
    const double loaders = median(s.loaders);
    const double pct = 100 * loaders / cores;
    std::string why;
    double waiting = 0;
    if (pct > r.number("max_threshold")) {
      why = "more than " + fmt(r.number("max_threshold"), 0) + "% of";
    } else {
      auto it = steps.find(rank);
      if (it == steps.end() || static_cast<double>(it->second.size()) < r.number("patience")) continue;
      std::vector<double> shares;
      for (const StepRecord* x : it->second) shares.push_back(data_share(*x));
      waiting = median(shares);
      if (waiting < r.number("data_threshold") || pct >= r.number("min_threshold")) continue;
      why = "fewer than " + fmt(r.number("min_threshold"), 0) + "% of";
    }
    out.push_back(finding(
        r, rank,
        rank_text(obs, rank) + " ran " + fmt(loaders, 0) + " data-loader processes, " + why + " the " +
            fmt(cores) + " cores it may use" +
            (waiting > 0 ? ", while its steps spent " + fmt(waiting) + "% of their time on data" : ""),
        {{"loader_processes", loaders}, {"cores_per_worker", cores}, {"data_percent", waiting}}));
  }
  return out;
}

}  // namespace heft::profile::detail
