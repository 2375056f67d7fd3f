#include "heft/profile/job_profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "heft/job/job_file.h"
#include "heft/job/record/job_db.h"
#include "heft/profile/diagnosis.h"
#include "heft/profile/rules.h"

namespace heft::profile {

namespace {

namespace fs = std::filesystem;

constexpr size_t kStepWindow = 1000;
constexpr size_t kSampleWindow = 600;
// Step-file bytes read a collection (split over the ranks, at least kMinStepBytes a rank:
// at 200 bytes a step line, 80 steps a second a rank of a 1024-rank job), and the longest
// line kept across reads.
constexpr size_t kStepBytesPerCollection = 16 << 20;
constexpr size_t kMinStepBytes = 16 << 10;
constexpr size_t kMaxStepLine = 64 << 10;

using job::unix_now;

}  // namespace

std::string profile_dir(const job::JobPaths& paths) { return paths.root + "/profile"; }
std::string trace_dir(const job::JobPaths& paths) { return paths.root + "/traces"; }

JobProfiler::JobProfiler(job::JobDb& db, int64_t job_id, const job::JobSpec& spec,
                         job::JobPaths paths, std::string log_name)
    : db_(db), job_id_(job_id), spec_(spec), paths_(std::move(paths)),
      log_name_(std::move(log_name)), notifier_(log_name_) {
  obs_.world = spec_.world_size();
  obs_.memory_mb = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                   static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
  obs_.cores = SystemSampler::cores();
  obs_.workers_here = spec_.world_size();  // the local launcher runs every worker here
  char host[256] = {0};
  local_host_ = ::gethostname(host, sizeof(host) - 1) == 0 && host[0] ? host : "localhost";
  std::error_code ec;
  fs::create_directories(profile_dir(paths_), ec);
  fs::create_directories(trace_dir(paths_), ec);
  for (int r = 0; r < obs_.world; ++r) {
    step_files_.emplace_back(profile_dir(paths_) + "/rank-" + std::to_string(r) + ".steps", 0);
    partial_.emplace_back();
    refused_.emplace_back();
  }
}

job::Environment JobProfiler::environment() {
  if (!spec_.profiler.enabled) return {};
  const long long sample_ms = std::max(100LL, std::llround(spec_.profiler.interval_s * 1000));
  return {{"HEFT_PROFILE_DIR", profile_dir(paths_)}, {"HEFT_TRACE_DIR", trace_dir(paths_)},
          {"HEFT_SYSTEM_SAMPLE_MS", std::to_string(sample_ms)}};
}

void JobProfiler::on_start(int, const std::vector<int>& pids) {
  // Traces describe the start that wrote them: a restarted group begins afresh.
  std::error_code ec;
  for (auto it = fs::directory_iterator(trace_dir(paths_), ec);
       !ec && it != fs::directory_iterator(); it.increment(ec))
    if (it->path().extension() == ".trace") fs::remove(it->path(), ec);
  sampler_.set_workers(pids);
  local_ranks_ = pids.size();
  remote_seen_.clear();
  host_recorded_.clear();
  obs_.started_at = unix_now();
  obs_.last_activity = obs_.started_at;
  obs_.first_step_at = 0;
  running_ = true;
  if (spec_.profiler.enabled) sampler_.sample();  // the baseline
  last_collect_ = obs_.started_at;
}

std::string JobProfiler::on_tick() {
  const double now = unix_now();
  if (!running_ || now - last_collect_ < spec_.profiler.interval_s) return "";
  last_collect_ = now;
  collect(now);
  return evaluate(false);
}

void JobProfiler::on_end(bool) {
  if (!running_) return;
  running_ = false;
  collect(unix_now());
  evaluate(true);
  notifier_.wait();  // the findings' notifications before the job's end is reported
}

std::string JobProfiler::diagnosis() {
  if (!spec_.profiler.enabled) return "";
  const Diagnosis d = diagnose(trace_dir(paths_), unix_now());
  return d.stuck() ? d.text() : "";
}

void JobProfiler::collect(double now) {
  obs_.now = now;
  std::vector<job::MetricPoint> points;
  if (spec_.profiler.enabled) {
    if (running_) sample_system(&points);
    read_steps(&points);
  }
  db_.add_metrics(job_id_, points);
  read_metrics();
  // The rules look at a window: the last kStepWindow steps of each rank and the last
  // kSampleWindow system samples, so a long job costs no more a second than a short one.
  const size_t max_steps = kStepWindow * static_cast<size_t>(std::max(1, obs_.world));
  if (obs_.steps.size() > max_steps)
    obs_.steps.erase(obs_.steps.begin(), obs_.steps.end() - static_cast<long>(max_steps));
  if (obs_.system.size() > kSampleWindow)
    obs_.system.erase(obs_.system.begin(), obs_.system.end() - static_cast<long>(kSampleWindow));
}

void JobProfiler::set_sample_source(SampleSource source) { source_ = std::move(source); }

namespace {

void add_rank_points(const SystemSample& s, const RankSample& r,
                     std::vector<job::MetricPoint>* points) {
  auto add = [&](const char* name, double v) {
    points->push_back({name, r.rank, s.timestamp, std::nullopt, v});
  };
  add("system:cpu_percent", r.cpu_percent);
  add("system:user_percent", r.user_percent);
  add("system:system_percent", r.system_percent);
  add("system:rss_mb", r.rss_mb);
  add("system:read_mb_s", r.read_mb_s);
  add("system:write_mb_s", r.write_mb_s);
  add("system:threads", r.threads);
  add("system:processes", r.processes);
}

// A host's own series (rank -1): each core's busy share and its available memory.
void add_host_points(const std::string& prefix, const SystemSample& s,
                     std::vector<job::MetricPoint>* points) {
  for (size_t c = 0; c < s.core_busy_percent.size(); ++c)
    points->push_back({prefix + "core" + std::to_string(c) + "_busy_percent", -1, s.timestamp,
                       std::nullopt, s.core_busy_percent[c]});
  if (s.memory_available_mb > 0)
    points->push_back({prefix + "memory_available_mb", -1, s.timestamp, std::nullopt,
                       s.memory_available_mb});
}

}  // namespace

void JobProfiler::sample_system(std::vector<job::MetricPoint>* points) {
  SystemSample s = sampler_.sample();
  for (const RankSample& r : s.ranks) add_rank_points(s, r, points);
  if (!s.ranks.empty()) add_host_points("system:", s, points);
  if (local_ranks_ > 0) {
    obs_.hosts[""].cores = s.cores;
    if (s.memory_mb > 0) obs_.hosts[""].memory_mb = s.memory_mb;
  }
  for (const RankSample& r : s.ranks) {
    if (host_recorded_.insert(r.rank).second)
      points->push_back({"system:host:" + local_host_, r.rank, s.timestamp, std::nullopt,
                         static_cast<double>(s.cores)});
    obs_.host_of_rank[r.rank] = "";
    std::vector<int>& here = obs_.hosts[""].ranks;
    if (std::find(here.begin(), here.end(), r.rank) == here.end()) here.push_back(r.rank);
  }
  std::map<std::string, SystemSample> by_host;  // other hosts' reads this time
  if (source_)
    for (int rank = static_cast<int>(local_ranks_); rank < obs_.world; ++rank)
      read_remote(rank, &s, &by_host, points);
  for (auto& [name, read] : by_host) {
    std::vector<SystemSample>& kept = obs_.hosts[name].samples;
    kept.push_back(std::move(read));
    if (kept.size() > kSampleWindow) kept.erase(kept.begin());
  }
  // A group that runs only on other hosts: the rules' machine is the largest host.
  if (local_ranks_ == 0 && !obs_.hosts.empty()) {
    int cores = 1, here = 1;
    for (const auto& [name, h] : obs_.hosts) {
      cores = std::max(cores, h.cores);
      here = std::max(here, static_cast<int>(h.ranks.size()));
    }
    obs_.cores = cores;
    obs_.workers_here = here;
  }
  if (!s.ranks.empty()) obs_.system.push_back(std::move(s));
}

void JobProfiler::read_remote(int rank, SystemSample* out,
                              std::map<std::string, SystemSample>* by_host,
                              std::vector<job::MetricPoint>* points) {
  const std::optional<std::string> text = source_(rank_sample_key(spec_.name, rank));
  SystemSample r;
  if (!text || !decode_rank_sample(*text, rank, &r)) return;
  double& seen = remote_seen_[rank];
  if (r.timestamp <= seen) return;  // nothing new since the last read
  seen = r.timestamp;
  HostObservation& host = obs_.hosts[r.host];
  host.cores = r.cores;
  if (r.memory_mb > 0) host.memory_mb = r.memory_mb;  // 0: an older shim's sample
  if (std::find(host.ranks.begin(), host.ranks.end(), rank) == host.ranks.end()) {
    host.ranks.push_back(rank);
    std::sort(host.ranks.begin(), host.ranks.end());
  }
  obs_.host_of_rank[rank] = r.host;
  double& host_time = host_seen_[r.host];
  if (r.timestamp > host_time) {
    host_time = r.timestamp;
    add_host_points("system:" + r.host + "/", r, points);
  }
  if (host_recorded_.insert(rank).second)
    points->push_back({"system:host:" + r.host, rank, r.timestamp, std::nullopt,
                       static_cast<double>(r.cores)});
  SystemSample& read = (*by_host)[r.host];
  if (r.timestamp >= read.timestamp) {  // the host's newest cores
    read.timestamp = r.timestamp;
    read.host = r.host;
    read.cores = r.cores;
    read.memory_mb = r.memory_mb;
    read.memory_available_mb = r.memory_available_mb;
    read.core_busy_percent = r.core_busy_percent;
  }
  for (const RankSample& x : r.ranks) {
    add_rank_points(r, x, points);
    out->ranks.push_back(x);
    read.ranks.push_back(x);
  }
}

void JobProfiler::read_steps(std::vector<job::MetricPoint>* points) {
  const size_t bound =
      std::max(kMinStepBytes, kStepBytesPerCollection / std::max<size_t>(1, step_files_.size()));
  for (size_t r = 0; r < step_files_.size(); ++r) {
    auto& [path, offset] = step_files_[r];
    // Never waits on a FIFO a worker left here nor reads a link (job_file.h); at most
    // `bound` bytes now, the rest at the next collection.
    job::JobFileRead read = job::read_job_file_range(path, static_cast<uint64_t>(offset), bound);
    if (!read.ok()) {
      if (read.status != job::JobFileStatus::kMissing && read.error != refused_[r])
        std::cerr << log_name_ << ": " << read.error << " (its step records are skipped)"
                  << std::endl;
      refused_[r] = read.error;
      continue;
    }
    refused_[r].clear();
    const std::string& chunk = read.bytes;
    offset += static_cast<int64_t>(chunk.size());
    std::string text = partial_[r] + chunk;
    size_t start = 0;
    for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
      StepRecord s;
      if (!parse_step_line(text.substr(start, nl - start), static_cast<int>(r), &s)) continue;
      obs_.steps.push_back(s);
      obs_.last_activity = std::max(obs_.last_activity, s.timestamp);
      if (s.timestamp >= obs_.started_at &&
          (obs_.first_step_at <= 0 || s.timestamp < obs_.first_step_at))
        obs_.first_step_at = s.timestamp;
      const int rank = static_cast<int>(r);
      auto add = [&](const char* name, double v) {
        points->push_back({name, rank, s.timestamp, s.step, v});
      };
      add("step:total_ms", s.total_ms);
      add("step:data_ms", s.data_ms);
      add("step:forward_ms", s.forward_ms);
      add("step:backward_ms", s.backward_ms);
      add("step:communication_ms", s.communication_ms);
      add("step:optimizer_ms", s.optimizer_ms);
    }
    partial_[r] = text.substr(start);
    if (partial_[r].size() > kMaxStepLine) partial_[r].clear();  // no step line: skipped
  }
}

// The metric series the rules read (the lowest rank's points of each name), and the newest
// metric point as activity.
void JobProfiler::read_metrics() {
  std::set<std::string> wanted;
  for (const job::RuleSpec& r : spec_.rules)
    for (const auto& [k, v] : r.parameters)
      if (v.is_string()) wanted.insert(v.get<std::string>());
  obs_.metrics.clear();
  if (const std::optional<double> t = db_.newest_metric_time(job_id_, &metrics_seen_))
    obs_.last_activity = std::max(obs_.last_activity, *t);
  for (const std::string& name : wanted) {
    std::vector<job::MetricPoint> all = db_.metrics(job_id_, name);
    int lowest = 1 << 30;
    for (const job::MetricPoint& p : all) lowest = std::min(lowest, p.rank);
    std::vector<job::MetricPoint>& mine = obs_.metrics[name];
    for (job::MetricPoint& p : all)
      if (p.rank == lowest) mine.push_back(std::move(p));
  }
}

std::string JobProfiler::evaluate(bool final) {
  std::string stop;
  for (const job::RuleSpec& rule : spec_.rules) {
    if (final && rule.rule == "StalledTrainingRule") continue;  // the job ended: not stalled
    for (const RuleFinding& f : evaluate_rule(rule, obs_)) {
      const std::string host = f.rank < 0 ? f.evidence.value("host", std::string()) : "";
      if (!recorded_.insert({host.empty() ? f.rule : f.rule + "@" + host, f.rank}).second) continue;
      job::Finding row;
      row.rule = f.rule;
      row.rank = f.rank;
      row.timestamp = obs_.now;
      row.message = f.message;
      row.evidence = f.evidence;
      row.evidence["recommendation"] = f.recommendation;
      const bool stops = rule.stop && !final && stop.empty();
      if (stops) {
        row.action = "stop";
        const std::string where = diagnosis();
        if (!where.empty()) row.evidence["diagnosis"] = where;
        stop = "rule " + f.rule + ": " + f.message;
      }
      db_.add_finding(job_id_, row);
      if (rule.notify.any())
        notifier_.send(rule.notify, {{"job_id", job_id_}, {"job", spec_.name}, {"rule", row.rule},
                                     {"rank", row.rank}, {"timestamp", row.timestamp},
                                     {"message", row.message}, {"evidence", row.evidence},
                                     {"action", stops ? "stop" : "none"}});
      std::cerr << log_name_ << ": rule " << f.rule << ": " << f.message << std::endl;
      if (row.evidence.contains("diagnosis"))
        std::cerr << log_name_ << ": collectives: "
                  << row.evidence["diagnosis"].get<std::string>() << std::flush;
    }
  }
  return stop;
}

}  // namespace heft::profile
