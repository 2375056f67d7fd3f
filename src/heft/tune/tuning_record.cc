#include "heft/tune/tuning_record.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "heft/error.h"
#include "heft/job/record/job_db.h"

namespace heft::tune {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool alive(int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::string objective_text(const json& v) {
  if (!v.is_number()) return "-";
  std::ostringstream os;
  os << v.get<double>();
  return os.str();
}

}  // namespace

bool tuning_ended(const json& t) {
  const std::string status = t.value("status", "");
  return status == "Completed" || status == "Failed" || status == "Stopped";
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw IoError("cannot write '" + tmp + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw IoError("cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
}

std::string tuning_dir(const std::string& home, const std::string& name) {
  return (fs::path(home) / "tunings" / name).string();
}

std::string stop_file(const std::string& dir) { return dir + "/stop-requested"; }

namespace {

// tuning.json of exactly `name`, as written.
std::optional<json> read_record(const std::string& home, const std::string& name) {
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    return std::nullopt;
  std::ifstream in(tuning_dir(home, name) + "/tuning.json");
  if (!in) return std::nullopt;
  json t = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!t.is_object()) return std::nullopt;
  return t;
}

// The newest tuning whose spec gave `base_name` (heft tune named it base_name-<time>).
std::optional<json> newest_of_base(const std::string& home, const std::string& base_name) {
  std::optional<json> newest;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(home) / "tunings", ec)) {
    std::optional<json> t = read_record(home, e.path().filename().string());
    if (!t || !(*t)["base_name"].is_string() || (*t)["base_name"] != base_name) continue;
    if (!newest || t->value("created_at", 0.0) > newest->value("created_at", 0.0))
      newest = std::move(t);
  }
  return newest;
}

}  // namespace

std::optional<json> read_tuning(const std::string& home, const std::string& name) {
  std::optional<json> record = read_record(home, name);
  if (!record) record = newest_of_base(home, name);
  if (!record) return std::nullopt;
  json t = std::move(*record);
  if (!tuning_ended(t) && !alive(t.value("pid", int64_t{0}))) {
    t["status"] = "Failed";
    t["failure_reason"] = "its heft tune process is gone (killed, or the machine restarted)";
  }
  json counts = json::object();
  for (const json& trial : t["trials"]) counts[trial.value("status", "?")] = counts.value(trial.value("status", "?"), 0) + 1;
  t["trial_counts"] = counts;
  return t;
}

std::vector<json> list_tunings(const std::string& home) {
  std::vector<json> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(home) / "tunings", ec))
    if (auto t = read_tuning(home, e.path().filename().string())) out.push_back(std::move(*t));
  std::sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a.value("created_at", 0.0) > b.value("created_at", 0.0);
  });
  return out;
}

std::string tunings_table(const std::vector<json>& tunings) {
  std::ostringstream os;
  // Names made from a base name are long (tune-fashion-2026-11-25-13-37-40-957).
  int name_width = 24;
  for (const json& t : tunings)
    name_width = std::max(name_width, static_cast<int>(t.value("name", "").size()) + 2);
  os << std::left << std::setw(name_width) << "NAME" << std::setw(12) << "STATUS" << std::setw(10)
     << "STRATEGY" << std::setw(9) << "TRIALS" << std::setw(10) << "DIVERGED" << std::setw(14)
     << "BEST" << "CREATED\n";
  for (const json& t : tunings) {
    const std::string trials = std::to_string(t["trials"].size()) + "/" + std::to_string(t.value("max_jobs", 0));
    os << std::setw(name_width) << t.value("name", "") << std::setw(12) << t.value("status", "")
       << std::setw(10) << t.value("strategy", "") << std::setw(9) << trials << std::setw(10)
       << t["trial_counts"].value("Diverged", 0) << std::setw(14)
       << (t["best_trial"].is_object() ? objective_text(t["best_trial"]["objective"]) : "-")
       << job::local_time_text(t.value("created_at", 0.0)) << "\n";
  }
  return os.str();
}

std::string describe_tuning_text(const json& t) {
  std::ostringstream os;
  os << "Tuning job:   " << t.value("name", "") << "\n"
     << "Status:       " << t.value("status", "") << "\n";
  if (t.contains("failure_reason")) os << "Reason:       " << t["failure_reason"].get<std::string>() << "\n";
  os << "Strategy:     " << t.value("strategy", "") << "\n"
     << "Objective:    " << t["objective"].value("type", "") << " " << t["objective"].value("metric", "") << "\n"
     << "Trials:       " << t["trials"].size() << " of " << t.value("max_jobs", 0) << ", "
     << t.value("max_parallel_jobs", 1) << " at a time;";
  for (const auto& [status, n] : t["trial_counts"].items()) os << " " << status << " " << n.get<int>();
  os << "\nCreated:      " << job::local_time_text(t.value("created_at", 0.0)) << "\n";
  if (t["best_trial"].is_object()) {
    os << "Best trial:   " << t["best_trial"]["name"].get<std::string>() << ": "
       << objective_text(t["best_trial"]["objective"]);
    for (const auto& [k, v] : t["best_trial"]["hyperparameters"].items()) os << " " << k << "=" << v.get<std::string>();
    os << "\n";
  }
  os << "\n" << std::left << std::setw(28) << "TRIAL" << std::setw(12) << "STATUS" << std::setw(14)
     << "OBJECTIVE" << "HYPERPARAMETERS\n";
  for (const json& trial : t["trials"]) {
    os << std::setw(28) << trial.value("name", "") << std::setw(12) << trial.value("status", "")
       << std::setw(14) << objective_text(trial["objective"]);
    std::string hp;
    for (const auto& [k, v] : trial["hyperparameters"].items()) hp += (hp.empty() ? "" : " ") + k + "=" + v.get<std::string>();
    os << hp << "\n";
    if (trial.contains("diverged") && trial["diverged"].is_string())
      os << std::string(28, ' ') << "diverged: " << trial["diverged"].get<std::string>() << "\n";
  }
  return os.str();
}

Result<std::vector<SeedTrial>> parents_trials(const std::string& home, const TuningSpec& spec) {
  using Seeds = Result<std::vector<SeedTrial>>;
  std::vector<SeedTrial> out;
  for (size_t i = 0; i < spec.warm_start_parents.size(); ++i) {
    const std::string& parent = spec.warm_start_parents[i];
    const std::optional<json> p = read_tuning(home, parent);
    const std::string field = "warm_start.parents[" + std::to_string(i) + "]";
    if (!p) return Seeds::failure(field + ": no tuning job named '" + parent + "'");
    if ((*p)["objective"].value("metric", "") != spec.objective_metric ||
        ((*p)["objective"].value("type", "") == "Maximize") != spec.maximize)
      return Seeds::failure(field + ": '" + parent + "' optimised " +
                            (*p)["objective"].value("type", "") + " " +
                            (*p)["objective"].value("metric", "") + ", not this tuning's objective");
    for (const json& trial : (*p)["trials"]) {
      SeedTrial seed;
      seed.diverged = trial.value("status", "") == "Diverged";
      if (!seed.diverged && !trial["objective"].is_number()) continue;
      const json& hp = trial["hyperparameters"];
      bool complete = true;
      for (const Range& r : spec.ranges.ranges()) {
        if (!hp.contains(r.name)) continue;  // inactive, or missing: to_unit's to refuse
        const std::string text = hp[r.name].get<std::string>();
        try {
          if (r.kind == Range::Kind::kCategorical) seed.config[r.name] = text;
          else if (r.kind == Range::Kind::kInteger) seed.config[r.name] = static_cast<int64_t>(std::stoll(text));
          else seed.config[r.name] = std::stod(text);
        } catch (const std::exception&) {
          complete = false;
        }
      }
      if (!complete) continue;
      if (!seed.diverged) {
        const double v = trial["objective"].get<double>();
        seed.objective = spec.maximize ? -v : v;
      }
      out.push_back(std::move(seed));
    }
  }
  return Seeds::success(std::move(out));
}

std::optional<TuningStop> request_tuning_stop(const std::string& home, const std::string& name) {
  std::optional<json> t = read_tuning(home, name);
  if (!t) return std::nullopt;
  const std::string dir = tuning_dir(home, t->value("name", name));  // a base name's newest
  if (t->contains("failure_reason")) {  // its heft tune is gone: record the end here
    std::ifstream in(dir + "/tuning.json");
    json raw = json::parse(in, nullptr, false);
    raw["status"] = "Stopped";
    raw["end_time"] = job::unix_now();
    write_file_atomically(dir + "/tuning.json", raw.dump(2) + "\n");
    return TuningStop::kOrphanStopped;
  }
  if (tuning_ended(*t)) return TuningStop::kAlreadyEnded;
  std::ofstream(stop_file(dir)) << "stop\n";
  return TuningStop::kRequested;
}

}  // namespace heft::tune
