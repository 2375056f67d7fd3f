// `heft describe JOB [--json]`: one job's statuses, transitions, counters, failure reason
// and final metrics (docs/jobs.md).
#include <iostream>
#include <memory>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

namespace {

struct DescribeArgs {
  std::string job;
  bool json = false;
};

}  // namespace

Command add_describe_command(CLI::App& app) {
  auto args = std::make_shared<DescribeArgs>();
  CLI::App* cmd = app.add_subcommand("describe", "Show one training job in full");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_flag("--json", args->json, "Print JSON instead of text");
  return [args]() -> int {
    std::optional<FoundJob> found = find_job_or_report("heft describe", args->job);
    if (!found) return 1;
    job::JobDb* db = found->db.get();
    const job::JobRecord& j = found->job;
    const auto transitions = db->transitions(j.id);
    const auto final_metrics = db->final_metrics(j.id);
    if (args->json)
      std::cout << job::describe_json(j, transitions, final_metrics).dump(2) << std::endl;
    else
      std::cout << job::describe_text(j, transitions, final_metrics) << std::flush;
    return 0;
  };
}

}  // namespace heft::cli
