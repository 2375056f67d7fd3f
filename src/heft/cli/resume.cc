// `heft resume JOB`: starts a Failed or Stopped job again under its own name, as a new
// attempt in its record, from its last checkpoints (the workers find them in
// SM_CHECKPOINT_DIR, as after a spot interruption). The spec is the one recorded when the
// job was created, validated again. Exit codes as `heft train`'s (docs/jobs.md).
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>

#include "heft/cli/commands.h"
#include "heft/job/job_report.h"
#include "heft/job/paths.h"
#include "heft/job/spec.h"
#include "heft/job/spec_env.h"
#include "heft/job/supervisor.h"

namespace heft::cli {

namespace {

constexpr const char* kName = "heft resume";

int resume(const std::string& name) {
  const std::string home = job::heft_home();
  std::unique_ptr<job::JobDb> db = job::open_job_db(home, false);
  if (!db) {
    std::cerr << kName << ": no job named '" << name << "' (no jobs in " << home << ")\n";
    return job::kExitBadSpec;
  }
  db->fail_orphaned_jobs();  // a job whose heft train was killed is Failed from here on
  const job::Result<job::JobRecord> found = db->find_job(name);
  if (!found.ok()) {
    std::cerr << kName << ": " << found.error() << "\n";
    return job::kExitBadSpec;
  }
  const job::Result<job::JobSpec> spec =
      job::spec_from_json(found.value().spec, "job '" + name + "'");
  if (!spec.ok()) {
    std::cerr << kName << ": the recorded spec no longer holds: " << spec.error() << "\n";
    return job::kExitBadSpec;
  }
  const job::Result<std::vector<std::string>> command =
      job::worker_command(spec.value(), heft_binary_dir());
  if (!command.ok()) {
    std::cerr << kName << ": " << command.error() << "\n";
    return job::kExitBadSpec;
  }
  job::Result<job::JobRecord> record = db->resume_job(name);
  if (!record.ok()) {
    std::cerr << kName << ": " << record.error() << "\n";
    return job::kExitBadSpec;
  }
  const job::JobPaths paths = job::job_paths(home, name);
  job::SupervisorOptions options;
  options.log_name = kName;
  options.progress = ::isatty(STDOUT_FILENO) == 1;
  options.worker_umask = user_umask();
  job::Supervisor supervisor(*db, std::move(record).value(), spec.value(), paths, command.value(),
                             options);
  return supervisor.run();
}

}  // namespace

Command add_resume_command(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "resume", "Start a Failed or Stopped job again from its last checkpoint, same name");
  cmd->add_option("job", *name, "The job's name")->required()->type_name("JOB");
  cmd->footer("Exit codes: 0 Completed, 1 Failed, 2 bad input (no such job, not resumable), "
              "3 Stopped.");
  return [name]() -> int { return resume(*name); };
}

}  // namespace heft::cli
