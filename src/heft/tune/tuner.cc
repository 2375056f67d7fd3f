#include "heft/tune/tuner.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <thread>
#include <vector>

#include "heft/error.h"
#include "heft/job/record/job_db.h"
#include "heft/job/record/job_report.h"
#include "heft/job/launch/process.h"
#include "heft/job/supervisor.h"
#include "heft/tune/divergence.h"
#include "heft/tune/early_stopping.h"
#include "heft/tune/hyperband.h"
#include "heft/tune/search_strategy.h"
#include "heft/tune/tuning_record.h"

namespace heft::tune {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }

struct Trial {
  std::string name;
  Config config;
  std::string status = "InProgress";
  std::optional<double> objective;
  bool early_stopped = false;
  std::string diverged;  // why it diverged (divergence.h); empty when it did not
  std::string note;
  std::unique_ptr<job::Process> process;
  int log_fd = -1;
};

std::string config_text(const Config& c) {
  std::string s;
  for (const auto& [k, v] : c) s += (s.empty() ? "" : " ") + k + "=" + value_text(v);
  return s;
}

// Moves what a trial's `heft train` printed since the last call into its log.
void drain(Trial& t) {
  char buf[65536];
  for (int fd : {t.process->stdout_fd(), t.process->stderr_fd()}) {
    if (fd < 0) continue;
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) break;
      if (t.log_fd >= 0 && ::write(t.log_fd, buf, static_cast<size_t>(n)) < 0) break;
    }
  }
}

class Run {
 public:
  Run(const TuningSpec& spec, const TunerOptions& options) : spec_(spec), options_(options) {}

  Result<int> run() {
    dir_ = tuning_dir(options_.home, spec_.name);
    const Result<std::vector<SeedTrial>> seeds = parents_trials(options_.home, spec_);
    if (!seeds.ok()) return Result<int>::failure(seeds.error());
    std::error_code ec;
    if (fs::exists(dir_, ec))
      return Result<int>::failure("a tuning job named '" + spec_.name + "' exists already (" +
                                  dir_ + "); choose another name (--name)");
    fs::create_directories(dir_, ec);
    if (ec) throw IoError("cannot create '" + dir_ + "': " + ec.message());
    template_ = spec_.template_path;
    if (template_.empty()) {  // inline: write it out for the trials
      template_ = dir_ + "/training-job.yaml";
      write_file_atomically(template_, spec_.training_job_yaml);
    }
    try {
      strategy_ = make_search_strategy(spec_.strategy, spec_.ranges, spec_.random_seed);
    } catch (const InvalidArgument& e) {  // a grid too large
      return Result<int>::failure(e.what());
    }
    std::vector<std::string> defined;
    for (const job::MetricDefinition& m : spec_.training_job.metric_definitions) defined.push_back(m.name);
    loss_metric_ = resolve_loss_metric(spec_.diverged_if, defined, spec_.objective_metric, spec_.maximize);
    if (spec_.strategy == "Hyperband")
      hyperband_ = std::make_unique<Hyperband>(spec_.hyperband_min_resource,
                                               spec_.hyperband_max_resource,
                                               spec_.hyperband_reduction_factor);
    started_at_ = job::unix_now();
    header();
    warm_start(seeds.value());
    save();
    struct sigaction sa {}, old_int{}, old_term{};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    g_signal = 0;
    const int code = loop();
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    return Result<int>::success(code);
  }

 private:
  bool stopping() {
    std::error_code ec;
    return g_signal != 0 || fs::exists(stop_file(dir_), ec) ||
           (options_.stop_requested && options_.stop_requested());
  }

  int loop() {
    int max_jobs = spec_.max_jobs;
    bool stopped = false;
    for (;;) {
      if (!stopped && stopping()) {
        stopped = true;
        status_ = "Stopping";
        for (Trial& t : trials_)
          if (t.process && !t.process->reaped()) t.process->signal_group(SIGTERM);
        say("stopping the running trials");
      }
      while (!stopped && running() < spec_.max_parallel_jobs &&
             static_cast<int>(trials_.size()) < max_jobs) {
        std::optional<Config> c = strategy_->suggest();
        if (!c) {
          max_jobs = static_cast<int>(trials_.size());  // a grid done
          break;
        }
        start(std::move(*c));
      }
      for (Trial& t : trials_)
        if (t.process && !t.process->reaped()) {
          drain(t);
          if (t.process->try_reap()) finish(t);
        }
      ++polls_;
      if ((spec_.early_stopping || hyperband_) && !stopped && polls_ % 2 == 0) early_stop();
      if (!loss_metric_.empty() && !stopped && polls_ % 5 == 0) watch_divergence();
      if (running() == 0 && (stopped || static_cast<int>(trials_.size()) >= max_jobs)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.poll_ms));
    }
    const bool any = best() != nullptr;
    status_ = stopped ? "Stopped" : any ? "Completed" : "Failed";
    ended_at_ = job::unix_now();
    save();
    if (options_.out) {
      *options_.out << "heft tune: tuning job " << spec_.name << " " << status_ << " after "
                    << trials_.size() << " trials";
      if (const Trial* b = best())
        *options_.out << "; best trial " << b->name << ": " << spec_.objective_metric << "="
                      << *b->objective << " (" << config_text(b->config) << ")";
      *options_.out << std::endl;
    }
    return stopped ? job::kExitStopped : any ? job::kExitCompleted : job::kExitFailed;
  }

  // The objective values a trial's job reported so far, in order, from its lowest rank;
  // negated for Maximize (strategies and the median rule minimise).
  std::vector<double> series(job::JobDb& db, const std::string& name) {
    std::vector<double> out;
    for (double v : metric_values(db, name, spec_.objective_metric))
      if (std::isfinite(v)) out.push_back(spec_.maximize ? -v : v);
    return out;
  }

  // A running trial whose loss became non-finite will not recover: stopped now, Diverged.
  void watch_divergence() {
    std::unique_ptr<job::JobDb> db = job::open_job_db(options_.home, false);
    if (!db) return;
    for (Trial& t : trials_) {
      if (!t.process || t.process->reaped() || !t.diverged.empty()) continue;
      const std::vector<double> loss = metric_values(*db, t.name, loss_metric_);
      if (std::all_of(loss.begin(), loss.end(), [](double v) { return std::isfinite(v); })) continue;
      t.diverged = divergence_reason(spec_.diverged_if, spec_.maximize, spec_.objective_metric,
                                     std::nullopt, loss_metric_, loss) + "; stopped";
      (void)db->request_stop(t.name);
    }
  }

  // The median rule (early_stopping.h) over the running trials.
  void early_stop() {
    std::unique_ptr<job::JobDb> db = job::open_job_db(options_.home, false);
    if (!db) return;
    for (Trial& t : trials_) {
      if (!t.process || t.process->reaped() || t.early_stopped) continue;
      const std::vector<double> s = series(*db, t.name);
      if (hyperband_) {
        if (!hyperband_->should_stop(t.name, s, &t.note)) continue;
      } else {
        if (!median_stop(s, ended_series_)) continue;
        t.note = "early stopped: its best after " + std::to_string(s.size()) +
                 " values is worse than the median of the earlier trials at that point";
      }
      t.early_stopped = true;
      (void)db->request_stop(t.name);
    }
  }

  void warm_start(const std::vector<SeedTrial>& seeds) {
    int seeded = 0;
    for (const SeedTrial& seed : seeds) {
      try {
        if (seed.diverged) strategy_->observe_failure(seed.config);
        else strategy_->observe(seed.config, seed.objective);
        ++seeded;
      } catch (const InvalidArgument&) {  // a value outside this tuning's ranges
      }
    }
    if (!spec_.warm_start_parents.empty())
      say("warm start: " + std::to_string(seeded) + " trials of the parent tuning jobs seed the strategy");
  }

  int running() const {
    int n = 0;
    for (const Trial& t : trials_) n += t.process && !t.process->reaped();
    return n;
  }

  void start(Config config) {
    Trial t;
    char index[8];
    std::snprintf(index, sizeof(index), "%03zu", trials_.size() + 1);
    t.name = spec_.name + "-" + index;
    t.config = std::move(config);
    job::SpawnOptions o;
    o.argv = {options_.heft_binary, "train", template_, "--name", t.name};
    for (const auto& [k, v] : t.config) {
      o.argv.push_back("--set");
      o.argv.push_back("hyperparameters." + k + "=" + value_text(v));
    }
    o.env = job::current_environment();
    o.env["HEFT_HOME"] = options_.home;
    o.capture_output = true;
    t.log_fd = ::open((dir_ + "/" + t.name + ".log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    try {
      t.process = job::Process::spawn(o);
    } catch (const job::SpawnError& e) {
      t.status = "Failed";
      row(t, e.what());
      strategy_->forget(t.config);
      trials_.push_back(std::move(t));
      save();
      return;
    }
    row(t, "");
    trials_.push_back(std::move(t));
    save();
  }

  void finish(Trial& t) {
    drain(t);
    if (t.log_fd >= 0) ::close(t.log_fd);
    t.log_fd = -1;
    std::string note;
    std::unique_ptr<job::JobDb> db = job::open_job_db(options_.home, false);
    heft::Result<job::JobRecord> record =
        db ? db->find_job(t.name) : heft::Result<job::JobRecord>::failure("no job database");
    if (record.ok()) {
      t.status = record.value().status;
      // A stop that came after the trial finished does not count.
      if (t.early_stopped && t.status == "Completed") t.early_stopped = false;
      if (t.early_stopped) note = t.note;
      std::optional<double> recorded;
      for (const job::MetricPoint& p : db->final_metrics(record.value().id))
        if (p.name == spec_.objective_metric) recorded = p.value;
      if (recorded && std::isfinite(*recorded)) t.objective = recorded;
      // A trial the user stopped is cut short, not judged.
      if (t.diverged.empty() && (t.status != "Stopped" || t.early_stopped))
        t.diverged = divergence_reason(spec_.diverged_if, spec_.maximize, spec_.objective_metric,
                                       recorded, loss_metric_, metric_values(*db, t.name, loss_metric_));
      std::vector<double> s = series(*db, t.name);
      if (!t.diverged.empty()) {  // worse than any trial at every point it reached
        t.status = "Diverged";
        note = "diverged: " + t.diverged;
        s.assign(std::max<size_t>(s.size(), 1), std::numeric_limits<double>::infinity());
        if (hyperband_) hyperband_->mark_failed(t.name);
      }
      if (!s.empty()) ended_series_.push_back(std::move(s));
      if (!t.objective && t.status == "Completed") {
        t.status = "Failed";
        note = "recorded no " + spec_.objective_metric;
      }
      if (t.status == "Failed" && note.empty()) note = record.value().failure_reason;
    } else {
      t.status = "Failed";
      note = "heft train " + job::describe_wait_status(t.process->wait_status()) +
             " before the job was recorded (" + dir_ + "/" + t.name + ".log)";
    }
    if (!t.diverged.empty())
      strategy_->observe_failure(t.config);
    else if (t.objective)
      strategy_->observe(t.config, spec_.maximize ? -*t.objective : *t.objective);
    else
      strategy_->forget(t.config);
    row(t, note);
    save();
  }

  const Trial* best() const {
    const Trial* b = nullptr;
    for (const Trial& t : trials_)
      if (t.objective && t.diverged.empty() && (!b || (spec_.maximize ? *t.objective > *b->objective
                                                : *t.objective < *b->objective)))
        b = &t;
    return b;
  }

  void header() {
    if (!options_.out) return;
    *options_.out << "heft tune: tuning job " << spec_.name << ": " << spec_.strategy << ", "
                  << spec_.max_jobs << " jobs, " << spec_.max_parallel_jobs << " at a time, "
                  << (spec_.maximize ? "maximize " : "minimize ") << spec_.objective_metric
                  << "; trials' output in " << dir_ << "\n"
                  << std::left << std::setw(static_cast<int>(spec_.name.size()) + 6) << "TRIAL"
                  << std::setw(12) << "STATUS" << std::setw(12) << "OBJECTIVE"
                  << "HYPERPARAMETERS" << std::endl;
  }

  void say(const std::string& what) {
    if (options_.out) *options_.out << "heft tune: " << what << std::endl;
  }

  void row(const Trial& t, const std::string& note) {
    if (!options_.out) return;
    std::ostringstream objective;
    if (t.objective) objective << *t.objective;
    *options_.out << std::left << std::setw(static_cast<int>(spec_.name.size()) + 6) << t.name
                  << std::setw(12) << t.status << std::setw(12) << objective.str()
                  << config_text(t.config) << (note.empty() ? "" : "  (" + note + ")")
                  << std::endl;
  }

  void save() {
    using nlohmann::json;
    json trials = json::array();
    for (const Trial& t : trials_) {
      json hp = json::object();
      for (const auto& [k, v] : t.config) hp[k] = value_text(v);
      trials.push_back({{"name", t.name}, {"status", t.status}, {"hyperparameters", hp},
                        {"early_stopped", t.early_stopped},
                        {"diverged", t.diverged.empty() ? json(nullptr) : json(t.diverged)},
                        {"objective", t.objective ? json(*t.objective) : json(nullptr)}});
    }
    json doc = {{"name", spec_.name},
                {"base_name", spec_.base_name.empty() ? json(nullptr) : json(spec_.base_name)},
                {"status", status_},
                {"pid", static_cast<int64_t>(::getpid())},
                {"strategy", spec_.strategy},
                {"objective", {{"metric", spec_.objective_metric},
                               {"type", spec_.maximize ? "Maximize" : "Minimize"}}},
                {"max_jobs", spec_.max_jobs},
                {"max_parallel_jobs", spec_.max_parallel_jobs},
                {"created_at", started_at_},
                {"end_time", ended_at_ > 0 ? json(ended_at_) : json(nullptr)},
                {"trials", trials},
                {"best_trial", nullptr}};
    if (const Trial* b = best())
      doc["best_trial"] = {{"name", b->name}, {"objective", *b->objective},
                           {"hyperparameters", trials[static_cast<size_t>(b - trials_.data())]["hyperparameters"]}};
    write_file_atomically(dir_ + "/tuning.json", doc.dump(2) + "\n");
  }

  const TuningSpec& spec_;
  const TunerOptions& options_;
  std::string dir_, template_;
  std::unique_ptr<SearchStrategy> strategy_;
  std::vector<Trial> trials_;
  std::vector<std::vector<double>> ended_series_;  // for the median rule
  std::string loss_metric_;                         // the divergence rule's; "" none
  uint64_t polls_ = 0;
  std::unique_ptr<Hyperband> hyperband_;
  std::string status_ = "InProgress";
  double started_at_ = 0, ended_at_ = 0;
};

}  // namespace

Result<int> run_tuning(const TuningSpec& spec, const TunerOptions& options) {
  return Run(spec, options).run();
}

}  // namespace heft::tune
