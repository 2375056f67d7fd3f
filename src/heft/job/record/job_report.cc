// Tables, JSON and CSV of jobs and metrics (job_report.h).
#include "heft/job/record/job_report.h"

#include "heft/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "heft/job/paths.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::job {

namespace {

// Columns padded to their widest cell, two spaces apart; the last column is not padded.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string value_text(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

nlohmann::json value_json(double v) {
  if (std::isfinite(v)) return v;
  return nullptr;
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

// Continuation lines of a multi-line value start under its first line.
std::string indented(const std::string& text, size_t indent) {
  std::string out;
  for (char c : text) {
    out.push_back(c);
    if (c == '\n') out.append(indent, ' ');
  }
  return out;
}

std::string command_text(const nlohmann::json& entry_point) {
  std::string out;
  if (!entry_point.is_array()) return out;
  for (const auto& arg : entry_point) out += (out.empty() ? "" : " ") + arg.get<std::string>();
  return out;
}

}  // namespace

std::unique_ptr<JobDb> open_job_db(const std::string& home, bool create) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status home_status = fs::status(home, ec);
  if (fs::exists(home_status) && !fs::is_directory(home_status))
    throw IoError("heft's home '" + home + "' (HEFT_HOME) is not a directory");
  const std::string path = database_path(home);
  if (!create && !fs::exists(path, ec)) {
    if (ec && ec != std::errc::no_such_file_or_directory)
      throw IoError("heft's home '" + home + "' (HEFT_HOME): cannot read " + path + ": " +
                    ec.message());
    return nullptr;
  }
  return JobDb::open(path);
}


double live_training_seconds(const JobRecord& job) { return job.training_seconds; }

nlohmann::json findings_json(const std::vector<Finding>& findings) {
  nlohmann::json out = nlohmann::json::array();
  for (const Finding& f : findings)
    out.push_back({{"rule", f.rule},
                   {"rank", f.rank},
                   {"timestamp", f.timestamp},
                   {"message", f.message},
                   {"evidence", f.evidence},
                   {"action", f.action}});
  return out;
}

double billable_instance_seconds(double running_seconds, int instance_count) {
  return running_seconds * std::max(1, instance_count);
}

double billable_instance_seconds(const JobRecord& job) {
  return billable_instance_seconds(job.billable_seconds, job.instance_count);
}

std::string decimal_text(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string billable_text(double running_seconds, int instance_count) {
  const int n = std::max(1, instance_count);
  return decimal_text(billable_instance_seconds(running_seconds, n), 1) + " s (" +
         decimal_text(running_seconds, 1) + " s running x " + std::to_string(n) +
         (n == 1 ? " instance)" : " instances)");
}

std::string status_text(const std::string& status, const std::string& secondary) {
  if (secondary.empty() || secondary == status) return status;
  return status + " (" + secondary + ")";
}

std::string jobs_table(const std::vector<JobRecord>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "STATUS", "SECONDARY", "CREATED", "TRAINING_S", "BILLABLE_S", "ATTEMPTS",
       "INTERRUPTIONS"}};
  for (const JobRecord& j : jobs)
    rows.push_back({j.name, j.status, j.secondary_status, local_time_text(j.created_at),
                    decimal_text(live_training_seconds(j), 1), decimal_text(billable_instance_seconds(j), 1),
                    std::to_string(j.attempts), std::to_string(j.interruptions)});
  return table(rows);
}

nlohmann::json jobs_json(const std::vector<JobRecord>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const JobRecord& j : jobs)
    out.push_back({{"name", j.name},
                   {"base_name", j.base_name},
                   {"status", j.status},
                   {"secondary_status", j.secondary_status},
                   {"failure_reason", j.failure_reason},
                   {"created_at", j.created_at},
                   {"end_time", optional_json(j.end_time)},
                   {"attempts", j.attempts},
                   {"interruptions", j.interruptions},
                   {"training_seconds", live_training_seconds(j)},
                   {"billable_seconds", billable_instance_seconds(j)},
                   {"running_seconds", j.billable_seconds},
                   {"instance_count", j.instance_count},
                   {"world_size", j.world_size},
                   {"job_dir", j.job_dir}});
  return out;
}

bool is_profile_metric(const std::string& name) {
  return name.rfind("system:", 0) == 0 || name.rfind("step:", 0) == 0;
}

nlohmann::json describe_json(const JobRecord& job, const std::vector<Transition>& transitions,
                             const std::vector<MetricPoint>& final_metrics,
                             const std::vector<Finding>& findings) {
  nlohmann::json t = nlohmann::json::array();
  for (const Transition& x : transitions)
    t.push_back({{"status", x.status},
                 {"start_time", x.start_time},
                 {"end_time", optional_json(x.end_time)},
                 {"message", x.message}});
  nlohmann::json m = nlohmann::json::array();
  for (const MetricPoint& p : final_metrics)
    if (!is_profile_metric(p.name))
    m.push_back({{"name", p.name},
                 {"value", value_json(p.value)},
                 {"step", p.step ? nlohmann::json(*p.step) : nlohmann::json(nullptr)},
                 {"rank", p.rank},
                 {"timestamp", p.timestamp}});
  return {{"name", job.name},
          {"base_name", job.base_name},
          {"status", job.status},
          {"secondary_status", job.secondary_status},
          {"failure_reason", job.failure_reason},
          {"attempts", job.attempts},
          {"interruptions", job.interruptions},
          {"training_seconds", live_training_seconds(job)},
          {"billable_seconds", billable_instance_seconds(job)},
          {"running_seconds", job.billable_seconds},
          {"created_at", job.created_at},
          {"training_start", optional_json(job.training_start)},
          {"end_time", optional_json(job.end_time)},
          {"exit_code", job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json(nullptr)},
          {"stop_requested", job.stop_requested},
          {"instance_count", job.instance_count},
          {"world_size", job.world_size},
          {"job_dir", job.job_dir},
          {"transitions", t},
          {"final_metrics", m},
          {"findings", findings_json(findings)},
          {"spec", job.spec}};
}

std::string describe_text(const JobRecord& job, const std::vector<Transition>& transitions,
                          const std::vector<MetricPoint>& final_metrics,
                          const std::vector<Finding>& findings) {
  std::ostringstream os;
  auto field = [&](const std::string& name, const std::string& value) {
    os << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ') << value << "\n";
  };
  field("Name:", job.name);
  field("Status:", status_text(job.status, job.secondary_status));
  if (!job.failure_reason.empty()) field("Failure reason:", indented(job.failure_reason, 18));
  field("Created:", local_time_text(job.created_at));
  if (job.end_time) field("Ended:", local_time_text(*job.end_time));
  field("Training time:", decimal_text(live_training_seconds(job), 1) + " s");
  field("Billable time:", billable_text(job.billable_seconds, job.instance_count));
  field("Attempts:", std::to_string(job.attempts));
  field("Interruptions:", std::to_string(job.interruptions));
  field("Entry point:", command_text(job.spec.value("entry_point", nlohmann::json::array())));
  field("Cluster:", std::to_string(job.instance_count) +
                        (job.instance_count == 1 ? " host, " : " hosts, ") +
                        std::to_string(job.world_size) +
                        (job.world_size == 1 ? " worker" : " workers"));
  field("Job directory:", job.job_dir);
  if (job.exit_code) field("Exit code:", std::to_string(*job.exit_code));
  os << "Transitions:\n";
  std::vector<std::vector<std::string>> rows;
  for (const Transition& t : transitions) {
    const double end = t.end_time ? *t.end_time : unix_now();
    rows.push_back({"  " + t.status, local_time_text(t.start_time),
                    t.end_time || !job.ended() ? decimal_text(end - t.start_time, 1) + " s" : "",
                    t.message.substr(0, t.message.find('\n'))});
  }
  os << table(rows);
  rows.clear();
  for (const MetricPoint& p : final_metrics)
    if (!is_profile_metric(p.name))
    rows.push_back({"  " + p.name, value_text(p.value),
                    (p.step ? "step " + std::to_string(*p.step) + ", " : "") + "rank " +
                        std::to_string(p.rank)});
  os << "Final metrics:" << (rows.empty() ? " none\n" : "\n");
  os << table(rows);
  os << "Findings:" << (findings.empty() ? " none\n" : "\n");
  for (const Finding& f : findings)
    os << "  " << f.rule << (f.rank >= 0 ? " (rank " + std::to_string(f.rank) + ")" : "")
       << (f.action == "stop" ? " [stopped the job]" : "") << ": " << f.message << "\n";
  return os.str();
}

std::string metrics_table(const std::vector<MetricPoint>& points, double since) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "RANK", "STEP", "VALUE", "ELAPSED_S"}};
  for (const MetricPoint& p : points)
    rows.push_back({p.name, std::to_string(p.rank), p.step ? std::to_string(*p.step) : "-",
                    value_text(p.value), decimal_text(p.timestamp - since, 3)});
  return table(rows);
}

std::string metrics_csv(const std::vector<MetricPoint>& points) {
  std::string out = "name,rank,step,value,timestamp\n";
  for (const MetricPoint& p : points) {
    std::string name = p.name;
    if (name.find_first_of(",\"\n") != std::string::npos) {
      std::string quoted = "\"";
      for (char c : name) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
      name = quoted + "\"";
    }
    out += name + "," + std::to_string(p.rank) + "," + (p.step ? std::to_string(*p.step) : "") +
           "," + value_text(p.value) + "," + decimal_text(p.timestamp, 6) + "\n";
  }
  return out;
}

std::vector<JobRecord> filter_jobs(const std::vector<JobRecord>& jobs, const JobFilter& filter) {
  std::vector<JobRecord> out;
  for (const JobRecord& j : jobs) {
    if (filter.limit && out.size() >= *filter.limit) break;
    const auto& st = filter.statuses;
    if (!st.empty() && std::find(st.begin(), st.end(), j.status) == st.end()) continue;
    if (filter.names &&
        std::find(filter.names->begin(), filter.names->end(), j.name) == filter.names->end())
      continue;
    if (filter.since && j.created_at < *filter.since) continue;
    out.push_back(j);
  }
  return out;
}

Result<std::vector<std::string>> parse_statuses(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const std::string& value : values) {
    std::istringstream items(value);
    std::string item;
    while (std::getline(items, item, ',')) {
      const auto& all = status::all();
      const auto match = std::find_if(all.begin(), all.end(), [&](const std::string& s) {
        return s.size() == item.size() &&
               std::equal(s.begin(), s.end(), item.begin(), [](char a, char b) {
                 return std::tolower(static_cast<unsigned char>(a)) ==
                        std::tolower(static_cast<unsigned char>(b));
               });
      });
      if (match == all.end())
        return Result<std::vector<std::string>>::failure(
            "--status: expected InProgress, Completed, Failed, Stopping or Stopped (or a comma "
            "list of them), found '" + item + "'");
      if (std::find(out.begin(), out.end(), *match) == out.end()) out.push_back(*match);
    }
  }
  return Result<std::vector<std::string>>::success(std::move(out));
}

namespace {

// "2h" -> 7200; nullopt unless a number >= 0 followed by one of s m h d w.
std::optional<double> duration_seconds(const std::string& text) {
  if (text.size() < 2 || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  const std::string units = "smhdw";
  const double scale[] = {1, 60, 3600, 86400, 604800};
  const size_t unit = units.find(text.back());
  if (unit == std::string::npos) return std::nullopt;
  const std::string number = text.substr(0, text.size() - 1);
  char* end = nullptr;
  const double v = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return std::nullopt;
  return v * scale[unit];
}

// "2026-11-25", "2026-11-25T14:00", "2026-11-25 14:00:05", each with an optional Z (UTC).
std::optional<double> iso_time(std::string t) {
  const bool utc = !t.empty() && (t.back() == 'Z' || t.back() == 'z');
  if (utc) t.pop_back();
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, n = 0;
  if (t.size() < 10 || std::sscanf(t.c_str(), "%4d-%2d-%2d%n", &year, &month, &day, &n) != 3 ||
      n != 10)
    return std::nullopt;
  if (t.size() > 10) {
    if ((t[10] != 'T' && t[10] != ' ') ||
        std::sscanf(t.c_str() + 11, "%2d:%2d%n", &hour, &minute, &n) != 2 || n != 5)
      return std::nullopt;
    if (t.size() > 16 &&
        (std::sscanf(t.c_str() + 16, ":%2d%n", &second, &n) != 1 || n != 3 || t.size() != 19))
      return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60)
    return std::nullopt;
  struct tm tm {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  tm.tm_isdst = -1;
  const time_t when = utc ? ::timegm(&tm) : std::mktime(&tm);
  if (when == static_cast<time_t>(-1)) return std::nullopt;
  return static_cast<double>(when);
}

}  // namespace

Result<double> parse_since(const std::string& text, double now) {
  if (const auto d = duration_seconds(text)) return Result<double>::success(now - *d);
  if (const auto t = iso_time(text)) return Result<double>::success(*t);
  return Result<double>::failure(
      "--since: expected a duration back from now (90s, 30m, 2h, 3d, 1w) or a date or time "
      "(2026-11-25, 2026-11-25T14:00, 2026-11-25T14:00:05Z), found '" + text + "'");
}

nlohmann::json metrics_json(const std::vector<MetricPoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const MetricPoint& p : points)
    out.push_back({{"name", p.name},
                   {"rank", p.rank},
                   {"step", p.step ? nlohmann::json(*p.step) : nlohmann::json(nullptr)},
                   {"value", value_json(p.value)},
                   {"timestamp", p.timestamp}});
  return out;
}

}  // namespace heft::job
