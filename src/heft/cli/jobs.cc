// `heft jobs [--status S] [--tuning NAME] [--since WHEN] [--limit N] [--json]`: the training
// jobs in the database, newest first, those the filters leave (docs/jobs.md).
#include <iostream>
#include <memory>

#include "heft/cli/commands.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

namespace {

constexpr const char* kName = "heft jobs";

struct JobsArgs {
  bool json = false;
  std::vector<std::string> statuses;
  std::string tuning;
  std::string since;
  int limit = 0;  // 0: no limit
};

// The filter --status, --since and --limit ask for; an error names the bad value.
heft::Result<job::JobFilter> make_filter(const JobsArgs& args) {
  job::JobFilter filter;
  const heft::Result<std::vector<std::string>> statuses = job::parse_statuses(args.statuses);
  if (!statuses.ok()) return heft::Result<job::JobFilter>::failure(statuses.error());
  filter.statuses = statuses.value();
  if (!args.since.empty()) {
    const heft::Result<double> since = job::parse_since(args.since, job::unix_now());
    if (!since.ok()) return heft::Result<job::JobFilter>::failure(since.error());
    filter.since = since.value();
  }
  if (args.limit > 0) filter.limit = static_cast<size_t>(args.limit);
  return heft::Result<job::JobFilter>::success(std::move(filter));
}

// The names of the tuning job's trials; nothing when there is no tuning job of that name.
std::optional<std::vector<std::string>> tuning_trials(const std::string& tuning) {
  const std::optional<nlohmann::json> t = tune::read_tuning(job::heft_home(), tuning);
  if (!t) return std::nullopt;
  std::vector<std::string> names;
  for (const nlohmann::json& trial : t->value("trials", nlohmann::json::array()))
    names.push_back(trial.value("name", ""));
  return names;
}

int list_jobs(const JobsArgs& args) {
  heft::Result<job::JobFilter> made = make_filter(args);
  if (!made.ok()) {
    std::cerr << kName << ": " << made.error() << "\n";
    return 2;
  }
  job::JobFilter filter = std::move(made).value();
  if (!args.tuning.empty()) {
    std::optional<std::vector<std::string>> trials = tuning_trials(args.tuning);
    if (!trials) {
      std::cerr << kName << ": --tuning: no tuning job named '" << args.tuning
                << "' (heft tunings lists them)\n";
      return 1;
    }
    filter.names = std::move(trials);
  }
  std::unique_ptr<job::JobDb> db = job::open_job_db(job::heft_home(), false);
  std::vector<job::JobRecord> jobs;
  if (db) {
    db->fail_orphaned_jobs();
    jobs = job::filter_jobs(db->list_jobs(), filter);
  }
  if (args.json)
    std::cout << job::jobs_json(jobs).dump(2) << std::endl;
  else
    std::cout << job::jobs_table(jobs) << std::flush;
  return 0;
}

}  // namespace

Command add_jobs_command(CLI::App& app) {
  auto args = std::make_shared<JobsArgs>();
  CLI::App* cmd = app.add_subcommand("jobs", "List training jobs, newest first");
  cmd->add_flag("--json", args->json, "Print a JSON array instead of a table");
  cmd->add_option("--status", args->statuses,
                  "Only jobs with this primary status: InProgress, Completed, Failed, Stopping, "
                  "Stopped (repeatable, or a comma list)")
      ->type_name("STATUS")
      ->allow_extra_args(false);
  cmd->add_option("--tuning", args->tuning, "Only the trials of this tuning job")
      ->type_name("NAME");
  cmd->add_option("--since", args->since,
                  "Only jobs created since: a duration back from now (30m, 2h, 3d, 1w) or a "
                  "date or time (2026-11-25, 2026-11-25T14:00; local, or UTC with Z)")
      ->type_name("WHEN");
  cmd->add_option("--limit", args->limit, "At most the newest N jobs (of those filtered)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  cmd->footer("Tuning trials are listed with the other jobs; --tuning NAME shows one tuning's.");
  return [args]() -> int { return list_jobs(*args); };
}

}  // namespace heft::cli
