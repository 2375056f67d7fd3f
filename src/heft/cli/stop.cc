// `heft stop JOB [--wait]`: asks a running job's supervisor, through the job database, to
// stop it; the supervisor sees the request within a second and stops the workers (SIGTERM,
// grace, SIGKILL). The job ends Stopped and its `heft train` exits 3 (docs/jobs.md).
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "heft/cli/commands.h"
#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"
#include "heft/tune/tuning_record.h"

namespace heft::cli {

namespace {

struct StopArgs {
  std::string job;
  bool wait = false;
};

// A tuning job: its `heft tune` stops the running trials and ends Stopped.
int stop_tuning(const StopArgs& args) {
  const std::string home = job::heft_home();
  switch (*tune::request_tuning_stop(home, args.job)) {
    case tune::TuningStop::kAlreadyEnded:
      std::cerr << "heft stop: tuning job '" << args.job << "' already ended; nothing to stop\n";
      return 0;
    case tune::TuningStop::kOrphanStopped:
      std::cerr << "heft stop: tuning job '" << args.job
                << "' had no running heft tune; it is now marked Stopped\n";
      return 0;
    case tune::TuningStop::kRequested:
      break;
  }
  std::cerr << "heft stop: stopping tuning job '" << args.job << "' and its running trials" << std::endl;
  while (args.wait) {
    const auto t = tune::read_tuning(home, args.job);
    if (!t || tune::tuning_ended(*t)) {
      std::cerr << "heft stop: tuning job '" << args.job << "' " << (t ? t->value("status", "") : "")
                << "\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return 0;
}

int stop_job(const StopArgs& args) {
  if (find_tuning_not_job(args.job)) return stop_tuning(args);
  std::unique_ptr<job::JobDb> db = job::open_job_db(job::heft_home(), false);
  if (!db) {
    std::cerr << "heft stop: no job named '" << args.job << "' (no job has run yet)\n";
    return 1;
  }
  // A base name means its newest job: resolved once, so the wait below follows that job
  // even when a newer one of the same base name starts meanwhile.
  const heft::Result<job::JobRecord> found = db->find_job(args.job);
  if (!found.ok()) {
    std::cerr << "heft stop: " << found.error() << "\n";
    return 1;
  }
  const std::string name = found.value().name;
  const heft::Result<job::StopRequest> r = db->request_stop(name);
  if (!r.ok()) {
    std::cerr << "heft stop: " << r.error() << "\n";
    return 1;
  }
  switch (r.value()) {
    case job::StopRequest::kAlreadyEnded:
      std::cerr << "heft stop: job '" << name << "' already ended ("
                << db->find_job(name).value().status << "); nothing to stop\n";
      return 0;
    case job::StopRequest::kOrphanStopped:
      std::cerr << "heft stop: job '" << name
                << "' had no running supervisor; it is now marked Stopped\n";
      return 0;
    case job::StopRequest::kRequested:
      break;
  }
  std::cerr << "heft stop: stopping job '" << name << "'" << std::endl;
  if (!args.wait) return 0;
  for (;;) {
    const heft::Result<job::JobRecord> j = db->find_job(name);
    if (!j.ok() || j.value().ended()) {
      if (j.ok())
        std::cerr << "heft stop: job '" << name << "' "
                  << job::status_text(j.value().status, j.value().secondary_status) << "\n";
      return 0;
    }
    db->fail_orphaned_jobs();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

Command add_stop_command(CLI::App& app) {
  auto args = std::make_shared<StopArgs>();
  CLI::App* cmd = app.add_subcommand("stop", "Stop a running training or tuning job");
  cmd->add_option("job", args->job, "The job's name")->required()->type_name("JOB");
  cmd->add_flag("--wait", args->wait, "Wait until the job has stopped");
  return [args]() -> int { return stop_job(*args); };
}

}  // namespace heft::cli
