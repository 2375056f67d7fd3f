// The lookup every command that reads one job starts with (describe, logs, metrics, resume,
// report, diagnose, delete): open the job database, mark jobs whose supervisor died as
// Failed, find the job by name or base name (JobDb::find_job), or say on stderr that there
// is none.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "heft/job/record/job_db.h"

namespace heft::cli {

struct FoundJob {
  std::unique_ptr<job::JobDb> db;
  job::JobRecord job;
};

// The job named `name` or, when none is, the newest job whose base_name is `name` (when
// several are, "<command>: fashion-cnn: the newest of 3 jobs named fashion-cnn-*: <name>" on
// stderr); or nothing after printing "<command>: no job named 'x' ..." on stderr. Throws
// heft::IoError for an unusable home (main turns it into exit 1).
std::optional<FoundJob> find_job_or_report(const std::string& command, const std::string& name);

}  // namespace heft::cli
