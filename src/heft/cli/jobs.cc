// `heft jobs [--json]`: every training job in the database, newest first (docs/jobs.md).
#include <iostream>
#include <memory>

#include "heft/cli/commands.h"
#include "heft/job/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

Command add_jobs_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("jobs", "List training jobs, newest first");
  cmd->add_flag("--json", *json, "Print a JSON array instead of a table");
  return [json]() -> int {
    std::unique_ptr<job::JobDb> db = job::open_job_db(job::heft_home(), false);
    std::vector<job::JobRecord> jobs;
    if (db) {
      db->fail_orphaned_jobs();
      jobs = db->list_jobs();
    }
    if (*json)
      std::cout << job::jobs_json(jobs).dump(2) << std::endl;
    else
      std::cout << job::jobs_table(jobs) << std::flush;
    return 0;
  };
}

}  // namespace heft::cli
