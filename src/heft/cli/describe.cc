// `heft describe JOB [--json]`: one job's statuses, transitions, counters, failure reason
// and final metrics (docs/jobs.md); or a tuning job's status, counts by status, best trial
// and trials (docs/tuning.md).
#include <iostream>
#include <memory>

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
    if (args->json)
      std::cout << job::describe_json(j, transitions, final_metrics, findings).dump(2)
                << std::endl;
    else
      std::cout << job::describe_text(j, transitions, final_metrics, findings) << std::flush;
    return 0;
  };
}

}  // namespace heft::cli
