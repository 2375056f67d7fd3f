// `heft delete JOB...` and `heft delete --tuning NAME`: removes jobs (their record with all
// its rows, in one transaction, then $HEFT_HOME/jobs/<name>/), or a tuning job (its
// $HEFT_HOME/tunings/<name>/) with all its trial jobs. A running job or tuning is refused
// (stop it first). Prints what it deleted on stdout. Exit 0 when everything named was deleted,
// 1 when something was missing, running or could not be removed, 2 on bad usage
// (docs/jobs.md).
#include <filesystem>
#include <iostream>
#include <memory>

#include "heft/cli/commands.h"
#include "heft/cli/job_lookup.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kName = "heft delete";

struct DeleteArgs {
  std::vector<std::string> jobs;
  std::string tuning;
};

// Removes `dir` and all under it; false after a line on stderr when it could not.
bool remove_dir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!ec) return true;
  std::cerr << kName << ": cannot remove " << dir << ": " << ec.message() << "\n";
  return false;
}

// Deletes the jobs named exactly `names` from the database (all or none), then their
// directories; 0, or 1 after saying why on stderr.
int delete_recorded(job::JobDb& db, const std::string& home,
                    const std::vector<std::string>& names, bool quiet) {
  const heft::Result<std::vector<job::JobRecord>> deleted = db.delete_jobs(names);
  if (!deleted.ok()) {
    std::cerr << kName << ": " << deleted.error() << "\n";
    return 1;
  }
  int code = 0;
  for (const job::JobRecord& j : deleted.value()) {
    const std::string dir = job::job_paths(home, j.name).root;
    if (!remove_dir(dir)) code = 1;
    if (!quiet)
      std::cout << "deleted job " << j.name << " ("
                << job::status_text(j.status, j.secondary_status) << ", created "
                << job::local_time_text(j.created_at) << ") and " << dir << "\n";
  }
  return code;
}

int delete_jobs(const std::vector<std::string>& args) {
  const std::string home = job::heft_home();
  int code = 0;
  for (const std::string& arg : args) {
    if (find_tuning_not_job(arg)) {
      std::cerr << kName << ": '" << arg << "' is a tuning job: heft delete --tuning " << arg
                << " deletes it with its trials\n";
      code = 1;
      continue;
    }
    std::optional<FoundJob> found = find_job_or_report(kName, arg);
    if (!found) {
      code = 1;
      continue;
    }
    if (delete_recorded(*found->db, home, {found->job.name}, false) != 0) code = 1;
  }
  return code;
}

int delete_tuning(const std::string& given) {
  const std::string home = job::heft_home();
  const std::optional<nlohmann::json> t = tune::read_tuning(home, given);
  if (!t) {
    std::cerr << kName << ": no tuning job named '" << given << "' (heft tunings lists them)\n";
    return 1;
  }
  const std::string name = t->value("name", given);  // a base name's newest
  if (!tune::tuning_ended(*t)) {
    std::cerr << kName << ": tuning job '" << name << "' is " << t->value("status", "")
              << ": a running tuning is not deleted; stop it first (heft stop " << name << ")\n";
    return 1;
  }
  std::vector<std::string> trials;
  for (const nlohmann::json& trial : t->value("trials", nlohmann::json::array()))
    trials.push_back(trial.value("name", ""));
  int code = 0;
  size_t deleted = 0;
  if (std::unique_ptr<job::JobDb> db = job::open_job_db(home, false)) {
    db->fail_orphaned_jobs();
    std::vector<std::string> recorded;
    for (const std::string& trial : trials)
      if (db->has_job(trial)) recorded.push_back(trial);
    // The trials first (all or none): a refused one leaves the tuning as it was.
    if (delete_recorded(*db, home, recorded, true) != 0) return 1;
    deleted = recorded.size();
  }
  const std::string dir = tune::tuning_dir(home, name);
  if (!remove_dir(dir)) code = 1;
  std::cout << "deleted tuning job " << name << " (" << t->value("status", "") << ", "
            << deleted << " trial job" << (deleted == 1 ? "" : "s") << ") and " << dir << "\n";
  return code;
}

}  // namespace

Command add_delete_command(CLI::App& app) {
  auto args = std::make_shared<DeleteArgs>();
  CLI::App* cmd = app.add_subcommand(
      "delete", "Delete ended training jobs, or a tuning job and its trials, with their files");
  cmd->add_option("job", args->jobs, "Jobs' names, or base names (the newest job of each)")
      ->type_name("JOB");
  cmd->add_option("--tuning", args->tuning, "Delete this tuning job and all its trial jobs")
      ->type_name("NAME");
  cmd->footer(
      "A running job (InProgress, Stopping) is refused: heft stop it first.\n"
      "Exit codes: 0 deleted, 1 a job missing, running or not removable, 2 bad usage.");
  return [args]() -> int {
    if (args->jobs.empty() == args->tuning.empty()) {
      std::cerr << kName << ": give the jobs to delete, or --tuning NAME (not both)\n";
      return 2;
    }
    return args->tuning.empty() ? delete_jobs(args->jobs) : delete_tuning(args->tuning);
  };
}

}  // namespace heft::cli
