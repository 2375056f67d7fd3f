// Tables, JSON and CSV of jobs and metrics (job_report.h).
#include "heft/job/job_report.h"

#include "heft/error.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "heft/job/paths.h"
#include "heft/job/spec_yaml.h"

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

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
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


double live_training_seconds(const JobRecord& job) {
  if (job.ended() || !job.training_start) return job.training_seconds;
  return std::max(job.training_seconds, unix_now() - *job.training_start);
}

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

double billable_instance_seconds(const JobRecord& job) {
  return job.billable_seconds * std::max(1, job.instance_count);
}

std::string jobs_table(const std::vector<JobRecord>& jobs) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "STATUS", "SECONDARY", "CREATED", "TRAINING_S", "BILLABLE_S", "ATTEMPTS",
       "INTERRUPTIONS"}};
  for (const JobRecord& j : jobs)
    rows.push_back({j.name, j.status, j.secondary_status, local_time_text(j.created_at),
                    fixed(live_training_seconds(j), 1), fixed(billable_instance_seconds(j), 1),
                    std::to_string(j.attempts), std::to_string(j.interruptions)});
  return table(rows);
}

nlohmann::json jobs_json(const std::vector<JobRecord>& jobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const JobRecord& j : jobs)
    out.push_back({{"name", j.name},
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
  field("Status:", job.status + " (" + job.secondary_status + ")");
  if (!job.failure_reason.empty()) field("Failure reason:", indented(job.failure_reason, 18));
  field("Created:", local_time_text(job.created_at));
  if (job.end_time) field("Ended:", local_time_text(*job.end_time));
  field("Training time:", fixed(live_training_seconds(job), 1) + " s");
  field("Billable time:", fixed(billable_instance_seconds(job), 1) + " s (" +
                              fixed(job.billable_seconds, 1) + " s running x " +
                              std::to_string(job.instance_count) +
                              (job.instance_count == 1 ? " instance)" : " instances)"));
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
                    t.end_time || !job.ended() ? fixed(end - t.start_time, 1) + " s" : "",
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
                    value_text(p.value), fixed(p.timestamp - since, 3)});
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
           "," + value_text(p.value) + "," + fixed(p.timestamp, 6) + "\n";
  }
  return out;
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
