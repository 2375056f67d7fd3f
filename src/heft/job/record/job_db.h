// The job database: every training job heft ran or runs on this machine, in one SQLite file
// ($HEFT_HOME/heft.db, WAL mode). The schema is documented in docs/jobs.md; the
// statuses mirror the cloud service's (primary InProgress/Completed/Failed/Stopping/Stopped,
// secondary transitions with timestamps).
//
// Concurrency: each process (each thread) opens its own JobDb. Readers never wait for
// writers (WAL); every write is one IMMEDIATE transaction, so concurrent writers queue on
// the busy timeout instead of failing, and a write is either wholly there or not at all.
// Runtime failures (an unreadable file, a lock held past the timeout) throw heft::IoError;
// expected user errors (a taken name, a missing job) are Result values.
//
// Schema version 2 (version 1 had no base_name column): open() migrates an older database in
// place, in one transaction; a newer one is refused.
//
// Deliberately left out: remote databases, downgrades.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "heft/result.h"

namespace heft::job {

class SqliteDb;

// Primary statuses.
namespace status {
inline constexpr const char* kInProgress = "InProgress";
inline constexpr const char* kCompleted = "Completed";
inline constexpr const char* kFailed = "Failed";
inline constexpr const char* kStopping = "Stopping";
inline constexpr const char* kStopped = "Stopped";
// The five above, in this order.
const std::vector<std::string>& all();
}  // namespace status

// Secondary statuses (the transitions' names).
namespace secondary {
inline constexpr const char* kStarting = "Starting";
inline constexpr const char* kTraining = "Training";
inline constexpr const char* kInterrupted = "Interrupted";
inline constexpr const char* kRestarting = "Restarting";
inline constexpr const char* kUploading = "Uploading";
inline constexpr const char* kStopping = "Stopping";
inline constexpr const char* kCompleted = "Completed";
inline constexpr const char* kFailed = "Failed";
inline constexpr const char* kStopped = "Stopped";
inline constexpr const char* kMaxRuntimeExceeded = "MaxRuntimeExceeded";
inline constexpr const char* kMaxWaitTimeExceeded = "MaxWaitTimeExceeded";
}  // namespace secondary

// Seconds since the Unix epoch, with sub-second precision: every timestamp in the database.
double unix_now();

struct Transition {
  std::string status;
  double start_time = 0;
  std::optional<double> end_time;  // none while it is the current one
  std::string message;
};

struct MetricPoint {
  std::string name;
  int rank = 0;
  double timestamp = 0;
  std::optional<int64_t> step;  // when the line had step=N
  double value = 0;             // NaN is stored as NULL and read back as NaN
};

// What a profiler rule found (profile/rules.h): when, about which rank (-1: the job), why.
struct Finding {
  std::string rule;
  int rank = -1;
  double timestamp = 0;
  std::string message;
  nlohmann::json evidence = nlohmann::json::object();
  std::string action = "none";  // "stop" when the finding stopped the job
};

struct JobRecord {
  int64_t id = 0;
  std::string name;
  std::string base_name;         // the spec's base_name when it named the job, else empty
  std::string status;            // primary
  std::string secondary_status;  // the current transition's
  std::string failure_reason;    // empty unless Failed
  nlohmann::json spec;           // spec_to_json() of the validated spec
  std::string job_dir;
  int instance_count = 1;
  int world_size = 1;
  double created_at = 0;
  std::optional<double> training_start;  // first time the group ran
  std::optional<double> end_time;        // when it reached a final status
  int attempts = 0;                      // starts of the group
  int interruptions = 0;                 // spot interruptions
  // Wall clock from the first start of the group to the end, restarts included, the time
  // between a Stopped or Failed end and its `heft resume` excluded; written every 0.2 s.
  double training_seconds = 0;
  // The *running* seconds: the time the group ran, summed over its starts. What is billed is
  // this times instance_count (billable_instance_seconds(), job_report.h).
  double billable_seconds = 0;
  std::optional<int> exit_code;          // of `heft train`, once ended
  int64_t supervisor_pid = 0;
  bool stop_requested = false;

  bool ended() const;    // Completed, Failed or Stopped
  bool running() const;  // InProgress (Starting, Training, ...) or Stopping
};

// What the supervisor updates as the job runs.
struct JobProgress {
  int attempts = 0;
  int interruptions = 0;
  double training_seconds = 0;
  double billable_seconds = 0;
  std::optional<double> training_start;
};

// The final word on a job, written in one transaction.
struct JobEnd {
  std::string status;     // Completed, Failed or Stopped
  std::string secondary;  // Completed, Failed, Stopped, MaxRuntimeExceeded, ...
  std::string message;    // of the last transition
  std::string failure_reason;
  int exit_code = 0;
  JobProgress progress;
};

// What request_stop() found.
enum class StopRequest {
  kRequested,      // the job was running; its supervisor will stop it within a second
  kAlreadyEnded,   // nothing to stop
  kOrphanStopped,  // its supervisor was gone; the job was marked Stopped directly
};

class JobDb {
 public:
  // Opens (creating) the database at `path` and its schema; WAL mode, a 30 s busy timeout.
  // Throws heft::IoError when the file cannot be opened or is not a heft database.
  static std::unique_ptr<JobDb> open(const std::string& path);
  ~JobDb();
  JobDb(const JobDb&) = delete;
  JobDb& operator=(const JobDb&) = delete;

  // Records a new job InProgress/Starting, supervised by this process. A name already taken
  // is an error naming the existing job's status and creation time. `base_name`: the spec's,
  // when the name was made from it (timestamped_name()), so that commands find the job by it.
  Result<JobRecord> create_job(const std::string& name, const nlohmann::json& spec,
                               const std::string& job_dir, int instance_count, int world_size,
                               const std::string& base_name = "");

  // `heft resume`: a Failed or Stopped job becomes InProgress/Starting again, supervised by
  // this process, keeping its record (attempts, interruptions, times, transitions, metrics);
  // its end time, exit code, failure reason and stop request are cleared. An error naming
  // the job's status when it is not Failed or Stopped, or "no job named 'x'".
  Result<JobRecord> resume_job(const std::string& name);
  // The job named `name`; when there is none, the newest job whose base_name is `name`; else
  // an error "no job named 'x'". What every command that takes a JOB acts on.
  Result<JobRecord> find_job(const std::string& name);
  // Whether a job is named exactly `name` (base names aside).
  bool has_job(const std::string& name);
  // How many jobs have this base_name.
  int count_base_name(const std::string& base_name);
  // Every job, newest first.
  std::vector<JobRecord> list_jobs();

  // Ends the current transition and starts `secondary_status`; when `primary` is not
  // empty, the job's primary status becomes it too.
  void transition(int64_t job_id, const std::string& secondary_status,
                  const std::string& message, const std::string& primary = "");
  void update_progress(int64_t job_id, const JobProgress& progress);
  // Final status, transition, counters and failure reason, at once.
  void finish(int64_t job_id, const JobEnd& end);

  // `heft delete`: removes the jobs named (exactly) `names` with every row of theirs
  // (transitions, metrics, findings), in one transaction. A job InProgress or Stopping is
  // refused with an error naming it and its status, and then nothing is deleted. Names with no
  // job are skipped. Returns the records deleted, in the order of `names`. Their directories
  // are the caller's to remove.
  Result<std::vector<JobRecord>> delete_jobs(const std::vector<std::string>& names);

  // `heft stop`: flags the job (primary status Stopping) for its supervisor, which polls
  // stop_requested(). A job whose supervisor no longer runs is marked Stopped at once.
  Result<StopRequest> request_stop(const std::string& name);
  bool stop_requested(int64_t job_id);

  // Appends metric points in one transaction.
  void add_metrics(int64_t job_id, const std::vector<MetricPoint>& points);
  // In the order they were stored; only `name`'s when not empty.
  std::vector<MetricPoint> metrics(int64_t job_id, const std::string& name = "");
  // The newest timestamp among the metric points stored after row *after_id that are not
  // the profiler's own ("system:...", "step:..."); *after_id moves to the last row stored.
  // nullopt when there is none. Cheap to poll: it reads only the new rows.
  std::optional<double> newest_metric_time(int64_t job_id, int64_t* after_id);
  // Profiler findings, in the order they were recorded.
  void add_finding(int64_t job_id, const Finding& finding);
  std::vector<Finding> findings(int64_t job_id);
  // The last value of each metric name, from the lowest rank that reported it.
  std::vector<MetricPoint> final_metrics(int64_t job_id);
  std::vector<Transition> transitions(int64_t job_id);

  // Jobs still InProgress or Stopping whose supervisor process is gone (killed with
  // SIGKILL, machine rebooted) become Failed with a reason saying so. Returns how many.
  int fail_orphaned_jobs();

 private:
  explicit JobDb(std::unique_ptr<SqliteDb> db);
  void create_schema();
  void transition_locked(int64_t job_id, const std::string& secondary_status,
                         const std::string& message, double now);
  std::vector<JobRecord> select_jobs(const std::string& where, const std::string& name);
  void migrate(int from_version);

  std::unique_ptr<SqliteDb> db_;
};

// "2024-05-01 12:00:03" in local time.
std::string local_time_text(double unix_seconds);

// A job name made from a base name, as the cloud SDK makes them from base_job_name:
// "fashion-cnn-2026-11-25-12-00-03-123" (UTC, milliseconds); with counter > 1, "-<counter>"
// follows (for a name taken within the same millisecond).
std::string timestamped_name(const std::string& base_name, double unix_seconds, int counter = 1);

}  // namespace heft::job
