// `heft diagnose JOB [--json]`: who is stuck where, from the ranks' collective traces in the
// job's directory (profile/diagnosis.h), groups named by their parallel dimension where the
// device mesh labelled them; for a running job or one that ended. Exit 0 when
// nothing is stuck, 3 when a collective is not finished on every rank, 1 on errors.
#include <chrono>
#include <iostream>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/record/job_db.h"
#include "heft/job/paths.h"
#include "heft/profile/diagnosis.h"
#include "heft/profile/job_profiler.h"

namespace heft::cli {

Command add_diagnose_command(CLI::App& app) {
  struct Args {
    std::string job;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "diagnose", "Say which rank is behind in which collective (a hung or failed job)");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_flag("--json", args->json, "Print JSON instead of text");
  return [args]() -> int {
    std::optional<FoundJob> found = find_job_or_report("heft diagnose", args->job);
    if (!found) return 1;
    const job::JobPaths paths = job::job_paths(job::heft_home(), found->job.name);
    const double now = job::unix_now();
    const profile::Diagnosis d = profile::diagnose(profile::trace_dir(paths), now);
    if (args->json) {
      nlohmann::json j = d.json();
      j["job"] = found->job.name;
      j["status"] = found->job.status;
      std::cout << j.dump(2) << std::endl;
    } else {
      const job::JobRecord& j = found->job;
      const bool same = j.secondary_status.empty() || j.secondary_status == j.status;
      std::cout << "job " << j.name << " (" << j.status
                << (same ? "" : ", " + j.secondary_status) << "), " << d.traces
                << " collective traces\n"
                << d.text() << std::flush;
    }
    return d.stuck() ? 3 : 0;
  };
}

}  // namespace heft::cli
