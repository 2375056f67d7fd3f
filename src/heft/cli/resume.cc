// `heft resume JOB`: starts a Failed or Stopped job again under its own name, as a new
// attempt in its record, from its last checkpoints (the workers find them in
// SM_CHECKPOINT_DIR, as after a spot interruption). The spec is the one recorded when the
// job was created, validated again. Exit codes as `heft train`'s (docs/jobs.md).
#include <iostream>
#include <memory>
#include <string>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/cli/supervise.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"

namespace heft::cli {

namespace {

constexpr const char* kName = "heft resume";

int resume(const std::string& job_arg) {
  const std::string home = job::heft_home();
  // A job whose heft train was killed is Failed from here on (the lookup marks it).
  std::optional<FoundJob> found = find_job_or_report(kName, job_arg);
  if (!found) return 1;
  const std::string name = found->job.name;  // a base name resolves to its newest job
  std::unique_ptr<job::JobDb> db = std::move(found->db);
  const heft::Result<job::JobSpec> spec =
      job::spec_from_json(found->job.spec, "job '" + name + "'");
  if (!spec.ok()) {
    std::cerr << kName << ": the recorded spec no longer holds: " << spec.error() << "\n";
    return job::kExitBadSpec;
  }
  const heft::Result<std::vector<std::string>> command =
      job::worker_command(spec.value(), heft_binary_dir());
  if (!command.ok()) {
    std::cerr << kName << ": " << command.error() << "\n";
    return job::kExitBadSpec;
  }
  heft::Result<job::JobRecord> record = db->resume_job(name);
  if (!record.ok()) {
    std::cerr << kName << ": " << record.error() << "\n";
    return job::kExitBadSpec;
  }
  const job::JobPaths paths = job::job_paths(home, name);
  // A job recorded before the input config directory existed gets it now (its files are
  // rewritten from the spec either way, as heft train writes them).
  if (const heft::Status written = job::write_input_config(spec.value(), paths); !written.ok()) {
    std::cerr << kName << ": " << written.error() << "\n";
    return job::kExitFailed;
  }
  return supervise(*db, std::move(record).value(), spec.value(), paths, command.value(), kName);
}

}  // namespace

Command add_resume_command(CLI::App& app) {
  auto name = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "resume", "Start a Failed or Stopped job again from its last checkpoint, same name");
  cmd->add_option("job", *name, "The job's name, or a base name (its newest job)")
      ->required()
      ->type_name("JOB");
  cmd->footer("Exit codes: 0 Completed, 1 Failed or no such job, 2 not resumable, "
              "3 Stopped.");
  return [name]() -> int { return resume(*name); };
}

}  // namespace heft::cli
