// Finding the job a command names (job_lookup.h).
#include "heft/cli/job_lookup.h"

#include <iostream>

#include "heft/job/record/job_report.h"
#include "heft/job/paths.h"

namespace heft::cli {

std::optional<FoundJob> find_job_or_report(const std::string& command, const std::string& name) {
  std::unique_ptr<job::JobDb> db = job::open_job_db(job::heft_home(), false);
  if (!db) {
    std::cerr << command << ": no job named '" << name << "' (no job has run yet)\n";
    return std::nullopt;
  }
  db->fail_orphaned_jobs();
  heft::Result<job::JobRecord> found = db->find_job(name);
  if (!found.ok()) {
    std::cerr << command << ": " << found.error() << "\n";
    return std::nullopt;
  }
  if (found.value().name != name) {
    const int n = db->count_base_name(name);
    if (n > 1)
      std::cerr << command << ": " << name << ": the newest of " << n << " jobs named " << name
                << "-*: " << found.value().name << "\n";
  }
  return FoundJob{std::move(db), std::move(found).value()};
}

}  // namespace heft::cli
