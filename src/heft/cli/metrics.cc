// `heft metrics JOB [--name M] [--format table|csv|json]`: the metric series the job's
// output gave, in the order they were stored (docs/jobs.md).
#include <iostream>
#include <memory>
#include <set>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

namespace {

struct MetricsArgs {
  std::string job;
  std::string name;
  std::string format = "table";
};

int show_metrics(const MetricsArgs& args) {
  std::optional<FoundJob> found = find_job_or_report("heft metrics", args.job);
  if (!found) return 1;
  job::JobDb* db = found->db.get();
  const job::JobRecord& j = found->job;
  const std::vector<job::MetricPoint> points = db->metrics(j.id, args.name);
  if (points.empty() && !args.name.empty()) {
    std::set<std::string> names;
    for (const job::MetricPoint& p : db->final_metrics(j.id)) names.insert(p.name);
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    std::cerr << "heft metrics: job '" << args.job << "' has no metric named '" << args.name
              << "'" << (known.empty() ? " (it has none yet)" : "; it has: " + known) << "\n";
    return 1;
  }
  if (args.format == "json")
    std::cout << job::metrics_json(points).dump(2) << std::endl;
  else if (args.format == "csv")
    std::cout << job::metrics_csv(points) << std::flush;
  else
    std::cout << job::metrics_table(points, j.created_at) << std::flush;
  return 0;
}

}  // namespace

Command add_metrics_command(CLI::App& app) {
  auto args = std::make_shared<MetricsArgs>();
  CLI::App* cmd = app.add_subcommand("metrics", "Show the metric series of a training job");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_option("--name", args->name, "Only this metric (e.g. train:loss)");
  cmd->add_option("--format", args->format, "table, csv or json")
      ->check(CLI::IsMember({"table", "csv", "json"}))
      ->capture_default_str();
  return [args]() -> int { return show_metrics(*args); };
}

}  // namespace heft::cli
