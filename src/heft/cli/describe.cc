// `heft describe JOB [--json]`: one job's statuses, transitions, counters, failure reason
// and final metrics (docs/jobs.md); or a tuning job's status, counts by status, best trial
// and trials (docs/tuning.md). A job the profiler sampled also lists its hosts: each with
// its cores and the ranks that ran there (docs/observability.md "Hosts"). A heft-train job
// with auto_layout shows the layout it chose, its predicted and its measured median step
// time, from the layout:* metrics of heft-train's "layout: ..." lines (docs/auto-layout.md).
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

namespace {

struct DescribeArgs {
  std::string job;
  bool json = false;
};

// The profiler's "system:host:<host>" series (a point per rank and start, its value the
// host's cores): [{"host", "cores", "ranks"}] by host name.
nlohmann::json job_hosts(job::JobDb& db, int64_t job_id,
                         const std::vector<job::MetricPoint>& final_metrics) {
  const std::string prefix = "system:host:";
  nlohmann::json out = nlohmann::json::array();
  for (const job::MetricPoint& f : final_metrics) {
    if (f.name.rfind(prefix, 0) != 0) continue;
    std::set<int> ranks;
    double cores = 0;
    for (const job::MetricPoint& p : db.metrics(job_id, f.name)) {
      ranks.insert(p.rank);
      cores = p.value;
    }
    out.push_back({{"host", f.name.substr(prefix.size())},
                   {"cores", static_cast<int>(cores)},
                   {"ranks", std::vector<int>(ranks.begin(), ranks.end())}});
  }
  return out;
}

// The layout:* final metrics as {"data": 2, ..., "predicted_step_s": 0.31,
// "measured_step_s": 0.34}; null when the job has none.
nlohmann::json job_layout(const std::vector<job::MetricPoint>& final_metrics) {
  const std::string prefix = "layout:";
  nlohmann::json out = nlohmann::json::object();
  for (const job::MetricPoint& f : final_metrics)
    if (f.name.rfind(prefix, 0) == 0) out[f.name.substr(prefix.size())] = f.value;
  return out.contains("data") ? out : nlohmann::json();
}

// "Layout: data 2 x sharded 1 x tensor 2 x pipeline 1, microbatches 1, virtual stages 1,
// checkpointing off; predicted 0.310 s/step, measured 0.340 s/step, calibrated 0.331 s/step
// (auto_layout, trial 2 of 3)" (without ", calibrated ..." and ", trial ..." when no layout
// trials ran: the calibrated prediction is the prediction x the trials' measured / predicted).
std::string layout_text(const nlohmann::json& layout) {
  if (layout.is_null()) return "";
  const auto whole = [&](const char* key) {
    return layout.contains(key) ? std::to_string(static_cast<int>(layout[key].get<double>())) : std::string("?");
  };
  const auto seconds = [&](const char* key) {
    if (!layout.contains(key)) return std::string("not yet");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f s/step", layout[key].get<double>());
    return std::string(buf);
  };
  return "Layout: data " + whole("data") + " x sharded " + whole("sharded") + " x tensor " + whole("tensor") +
         " x pipeline " + whole("pipeline") + ", microbatches " + whole("microbatches") + ", virtual stages " +
         whole("virtual_stages") + ", checkpointing " + (whole("checkpointing") == "1" ? "on" : "off") +
         "; predicted " + seconds("predicted_step_s") + ", measured " + seconds("measured_step_s") +
         (layout.contains("calibrated_step_s") ? ", calibrated " + seconds("calibrated_step_s") : std::string()) +
         " (auto_layout" + (whole("trials") != "?" && whole("trials") != "0"
                                ? ", trial " + whole("trial") + " of " + whole("trials") : std::string()) +
         ")\n";
}

std::string hosts_text(const nlohmann::json& hosts) {
  if (hosts.empty()) return "";
  std::string text = "Hosts:\n";
  for (const nlohmann::json& h : hosts) {
    std::string ranks;
    for (const nlohmann::json& r : h["ranks"])
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r.get<int>());
    text += "  " + h["host"].get<std::string>() + ": " + std::to_string(h["cores"].get<int>()) +
            " cores, rank" + (h["ranks"].size() == 1 ? " " : "s ") + ranks + "\n";
  }
  return text;
}

}  // namespace

std::optional<nlohmann::json> find_tuning_not_job(const std::string& name) {
  const std::string home = job::heft_home();
  std::optional<nlohmann::json> t = tune::read_tuning(home, name);
  if (!t) return std::nullopt;
  std::unique_ptr<job::JobDb> db = job::open_job_db(home, false);
  if (db && db->find_job(name).ok()) return std::nullopt;
  return t;
}

Command add_describe_command(CLI::App& app) {
  auto args = std::make_shared<DescribeArgs>();
  CLI::App* cmd = app.add_subcommand("describe", "Show one training or tuning job in full");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_flag("--json", args->json, "Print JSON instead of text");
  return [args]() -> int {
    if (const auto t = find_tuning_not_job(args->job)) {
      if (args->json)
        std::cout << t->dump(2) << std::endl;
      else
        std::cout << tune::describe_tuning_text(*t) << std::flush;
      return 0;
    }
    std::optional<FoundJob> found = find_job_or_report("heft describe", args->job);
    if (!found) return 1;
    job::JobDb* db = found->db.get();
    const job::JobRecord& j = found->job;
    const auto transitions = db->transitions(j.id);
    const auto final_metrics = db->final_metrics(j.id);
    const auto findings = db->findings(j.id);
    const nlohmann::json hosts = job_hosts(*db, j.id, final_metrics);
    const nlohmann::json layout = job_layout(final_metrics);
    if (args->json) {
      nlohmann::json out = job::describe_json(j, transitions, final_metrics, findings);
      out["hosts"] = hosts;
      if (!layout.is_null()) out["layout"] = layout;
      std::cout << out.dump(2) << std::endl;
    } else {
      std::cout << job::describe_text(j, transitions, final_metrics, findings)
                << layout_text(layout) << hosts_text(hosts) << std::flush;
    }
    return 0;
  };
}

}  // namespace heft::cli
