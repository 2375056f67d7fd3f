// Where a training job's worker output goes (supervisor.h): each rank's log file
// (logs/rank-N.log, appended across restarts, written line by line so `heft logs --follow`
// sees lines as they come), the metric points the lines give (buffered, written to the
// database in one transaction at most every flush interval), the terminal ("[rank N] line",
// stdout lines to stdout, stderr lines to stderr) and the progress line under them.
//
// Deliberately left out: deciding anything about the job; single-threaded (the launcher's).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "heft/job/record/job_db.h"
#include "heft/job/metric_extractor.h"
#include "heft/job/paths.h"
#include "heft/job/progress.h"
#include "heft/job/spec/spec.h"

namespace heft::job {

class JobOutput {
 public:
  // Creates (or opens for appending) every rank's log. Throws heft::IoError naming a log
  // that cannot be opened.
  JobOutput(const JobPaths& paths, const JobSpec& spec, bool echo, bool progress,
            ProgressLine progress_line);
  ~JobOutput();
  JobOutput(const JobOutput&) = delete;
  JobOutput& operator=(const JobOutput&) = delete;

  // One line of `rank` (without '\n'); elapsed_s is the job's age, for the progress line.
  void line(int rank, bool is_stderr, std::string_view text, double elapsed_s);
  // Writes the buffered metric points when flush_every_s has passed since the last write;
  // redraws the progress line.
  void tick(JobDb& db, int64_t job_id, double flush_every_s, const std::string& status,
            double elapsed_s);
  // Writes every buffered metric point now.
  void flush_metrics(JobDb& db, int64_t job_id);
  // Erases the progress line (before heft writes a message of its own).
  void clear_progress();
  // The last lines `rank` wrote (at most 10 and 4 KiB; the newest always, cut only past
  // 4 KiB with a note of what was left out), joined by '\n'.
  std::string tail(int rank) const;

 private:
  std::vector<int> log_fds_;
  std::vector<std::deque<std::string>> tails_;
  MetricExtractor extractor_;
  std::vector<MetricPoint> pending_;
  std::chrono::steady_clock::time_point last_flush_;
  bool echo_;
  bool progress_;
  bool progress_shown_ = false;
  ProgressLine progress_line_;
};

}  // namespace heft::job
