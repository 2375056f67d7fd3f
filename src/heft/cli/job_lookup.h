// The lookup every command that reads one job starts with (describe, logs, metrics, resume):
// open the job database, mark jobs whose supervisor died as Failed, find the job by name,
// or say on stderr that there is none.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "heft/job/job_db.h"

namespace heft::cli {

struct FoundJob {
  std::unique_ptr<job::JobDb> db;
  job::JobRecord job;
};

// The job named `name`, or nothing after printing "<command>: no job named 'x' ..." on
// stderr. Throws heft::IoError for an unusable home (main turns it into exit 1).
std::optional<FoundJob> find_job_or_report(const std::string& command, const std::string& name);

}  // namespace heft::cli
