// `heft metrics JOB [--name M] [--all] [--format table|csv|json]`: the metric series the
// job's output gave, in the order they were stored; the profiler's series (system:*, step:*)
// only with --all or by --name (docs/jobs.md).
#include <algorithm>
#include <iostream>
#include <memory>
#include <set>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

namespace {

struct MetricsArgs {
  std::string job;
  std::string name;
  std::string format = "table";
  bool all = false;
};

int show_metrics(const MetricsArgs& args) {
  std::optional<FoundJob> found = find_job_or_report("heft metrics", args.job);
  if (!found) return 1;
  job::JobDb* db = found->db.get();
  const job::JobRecord& j = found->job;
  std::vector<job::MetricPoint> points = db->metrics(j.id, args.name);
  size_t hidden = 0;  // the profiler's points left out
  if (points.empty() && !args.name.empty()) {
    std::set<std::string> names;
    for (const job::MetricPoint& p : db->final_metrics(j.id)) names.insert(p.name);
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    std::cerr << "heft metrics: job '" << args.job << "' has no metric named '" << args.name
              << "'" << (known.empty() ? " (it has none yet)" : "; it has: " + known) << "\n";
    return 1;
  }
  if (args.name.empty() && !args.all) {
    const auto profile = std::remove_if(points.begin(), points.end(), [](const job::MetricPoint& p) {
      return job::is_profile_metric(p.name);
    });
    hidden = static_cast<size_t>(points.end() - profile);
    points.erase(profile, points.end());
  }
  if (args.format == "json")
    std::cout << job::metrics_json(points).dump(2) << std::endl;
  else if (args.format == "csv")
    std::cout << job::metrics_csv(points) << std::flush;
  else
    std::cout << job::metrics_table(points, j.created_at) << std::flush;
  if (hidden > 0 && args.format == "table")
    std::cerr << "(" << hidden << " points of the profiler's system:* and step:* series not "
              << "shown: --all, or --name one of them)" << std::endl;
  return 0;
}

}  // namespace

Command add_metrics_command(CLI::App& app) {
  auto args = std::make_shared<MetricsArgs>();
  CLI::App* cmd = app.add_subcommand("metrics", "Show the metric series of a training job");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_option("--name", args->name, "Only this metric (e.g. train:loss)");
  cmd->add_flag("--all", args->all,
                "Also the profiler's series (system:*, step:*; docs/observability.md)");
  cmd->add_option("--format", args->format, "table, csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}))
      ->capture_default_str();
  return [args]() -> int { return show_metrics(*args); };
}

}  // namespace heft::cli
