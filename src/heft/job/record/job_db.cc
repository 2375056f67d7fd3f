// The job database over SQLite (job_db.h): the jobs and their transitions. The schema, its
// versions and open() are in job_db_schema.cc, the metric points and findings in
// job_db_metrics.cc. Every write is one SqliteTransaction (BEGIN IMMEDIATE).
#include "heft/job/record/job_db.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "heft/error.h"
#include "heft/job/launch/process.h"
#include "heft/job/record/sqlite.h"

namespace heft::job {

namespace {

// The tables holding a job's rows besides `jobs` itself, deleted with it.
const char* const kJobRowTables[] = {"metrics", "findings", "transitions"};

const char* const kJobColumns =
    "id, name, status, secondary_status, failure_reason, spec, job_dir, instance_count, "
    "world_size, created_at, training_start, end_time, attempts, interruptions, "
    "training_seconds, billable_seconds, exit_code, supervisor_pid, stop_requested, base_name";

JobRecord read_job(const SqliteStatement& s) {
  JobRecord j;
  j.id = s.int64(0);
  j.name = s.text(1);
  j.status = s.text(2);
  j.secondary_status = s.text(3);
  j.failure_reason = s.text(4);
  j.spec = nlohmann::json::parse(s.text(5), nullptr, false);
  j.job_dir = s.text(6);
  j.instance_count = static_cast<int>(s.int64(7));
  j.world_size = static_cast<int>(s.int64(8));
  j.created_at = s.real(9);
  j.training_start = s.optional_real(10);
  j.end_time = s.optional_real(11);
  j.attempts = static_cast<int>(s.int64(12));
  j.interruptions = static_cast<int>(s.int64(13));
  j.training_seconds = s.real(14);
  j.billable_seconds = s.real(15);
  if (auto code = s.optional_int64(16)) j.exit_code = static_cast<int>(*code);
  j.supervisor_pid = s.int64(17);
  j.stop_requested = s.int64(18) != 0;
  j.base_name = s.text(19);
  return j;
}

// The counters the supervisor keeps, inside the caller's transaction.
void write_progress(SqliteDb& db, int64_t job_id, const JobProgress& p) {
  db.prepare(
        "UPDATE jobs SET attempts = ?2, interruptions = ?3, training_seconds = ?4, "
        "billable_seconds = ?5, training_start = COALESCE(training_start, ?6) WHERE id = ?1")
      .bind(1, job_id)
      .bind(2, p.attempts)
      .bind(3, p.interruptions)
      .bind(4, p.training_seconds)
      .bind(5, p.billable_seconds)
      .bind(6, p.training_start)
      .run();
}

}  // namespace

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const std::vector<std::string>& status::all() {
  static const std::vector<std::string> all = {kInProgress, kCompleted, kFailed, kStopping,
                                               kStopped};
  return all;
}

bool JobRecord::running() const {
  return status == status::kInProgress || status == status::kStopping;
}

bool JobRecord::ended() const {
  return status == status::kCompleted || status == status::kFailed ||
         status == status::kStopped;
}

Result<JobRecord> JobDb::create_job(const std::string& name, const nlohmann::json& spec,
                                    const std::string& job_dir, int instance_count,
                                    int world_size, const std::string& base_name) {
  const double now = unix_now();
  SqliteTransaction tx(*db_);
  {
    SqliteStatement s = db_->prepare("SELECT status, created_at FROM jobs WHERE name = ?1");
    s.bind(1, name);
    if (s.step())
      return Result<JobRecord>::failure(
          "a job named '" + name + "' already exists (" + s.text(0) + ", created " +
          local_time_text(s.real(1)) + "); job names are unique: choose another with --name");
  }
  const pid_t pid = ::getpid();
  db_->prepare(
         "INSERT INTO jobs (name, status, secondary_status, spec, job_dir, instance_count, "
         "world_size, created_at, supervisor_pid, supervisor_start, base_name) "
         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")
      .bind(1, name)
      .bind(2, status::kInProgress)
      .bind(3, secondary::kStarting)
      .bind(4, spec.dump())
      .bind(5, job_dir)
      .bind(6, instance_count)
      .bind(7, world_size)
      .bind(8, now)
      .bind(9, static_cast<int64_t>(pid))
      .bind(10, static_cast<int64_t>(process_start_ticks(pid)))
      .bind(11, base_name)
      .run();
  const int64_t id = db_->last_insert_rowid();
  db_->prepare(
         "INSERT INTO transitions (job_id, seq, status, start_time, message) "
         "VALUES (?1, 1, ?2, ?3, ?4)")
      .bind(1, id)
      .bind(2, secondary::kStarting)
      .bind(3, now)
      .bind(4, "Preparing the workers")
      .run();
  tx.commit();
  return find_job(name);
}

Result<JobRecord> JobDb::resume_job(const std::string& name) {
  const double now = unix_now();
  SqliteTransaction tx(*db_);
  int64_t id = 0;
  int attempts = 0;
  {
    SqliteStatement s = db_->prepare("SELECT id, status, attempts FROM jobs WHERE name = ?1");
    s.bind(1, name);
    if (!s.step()) return Result<JobRecord>::failure("no job named '" + name + "'");
    const std::string status = s.text(1);
    if (status != status::kFailed && status != status::kStopped)
      return Result<JobRecord>::failure(
          "job '" + name + "' is " + status +
          ": only a Failed or Stopped job can be resumed (a running job resumes by itself "
          "after a spot interruption; a Completed one is done)");
    id = s.int64(0);
    attempts = static_cast<int>(s.int64(2));
  }
  const pid_t pid = ::getpid();
  db_->prepare(
         "UPDATE jobs SET status = ?2, failure_reason = '', end_time = NULL, exit_code = NULL, "
         "stop_requested = 0, supervisor_pid = ?3, supervisor_start = ?4 WHERE id = ?1")
      .bind(1, id)
      .bind(2, status::kInProgress)
      .bind(3, static_cast<int64_t>(pid))
      .bind(4, static_cast<int64_t>(process_start_ticks(pid)))
      .run();
  transition_locked(id, secondary::kStarting,
                    "Resuming from the last checkpoint (heft resume; attempt " +
                        std::to_string(attempts + 1) + ")",
                    now);
  tx.commit();
  return find_job(name);
}

std::vector<JobRecord> JobDb::select_jobs(const std::string& where, const std::string& name) {
  SqliteStatement s = db_->prepare(std::string("SELECT ") + kJobColumns + " FROM jobs " + where);
  if (!name.empty()) s.bind(1, name);
  std::vector<JobRecord> out;
  while (s.step()) out.push_back(read_job(s));
  return out;
}

Result<JobRecord> JobDb::find_job(const std::string& name) {
  std::vector<JobRecord> jobs = select_jobs("WHERE name = ?1", name);
  if (jobs.empty()) jobs = select_jobs("WHERE base_name = ?1 ORDER BY id DESC LIMIT 1", name);
  if (jobs.empty())
    return Result<JobRecord>::failure("no job named '" + name + "' (heft jobs lists them)");
  return Result<JobRecord>::success(std::move(jobs.front()));
}

bool JobDb::has_job(const std::string& name) {
  SqliteStatement s = db_->prepare("SELECT 1 FROM jobs WHERE name = ?1");
  s.bind(1, name);
  return s.step();
}

int JobDb::count_base_name(const std::string& base_name) {
  SqliteStatement s = db_->prepare("SELECT COUNT(*) FROM jobs WHERE base_name = ?1");
  s.bind(1, base_name);
  return s.step() ? static_cast<int>(s.int64(0)) : 0;
}

std::vector<JobRecord> JobDb::list_jobs() { return select_jobs("ORDER BY id DESC", ""); }

Result<std::vector<JobRecord>> JobDb::delete_jobs(const std::vector<std::string>& names) {
  SqliteTransaction tx(*db_);
  std::vector<JobRecord> found;
  for (const std::string& name : names) {
    std::vector<JobRecord> j = select_jobs("WHERE name = ?1", name);
    if (j.empty()) continue;
    if (j.front().running())
      return Result<std::vector<JobRecord>>::failure(
          "job '" + name + "' is " + j.front().status + " (" + j.front().secondary_status +
          "): a running job is not deleted; stop it first (heft stop " + name + ")");
    found.push_back(std::move(j.front()));
  }
  for (const JobRecord& j : found) {
    for (const char* table : kJobRowTables)
      db_->prepare(std::string("DELETE FROM ") + table + " WHERE job_id = ?1").bind(1, j.id).run();
    db_->prepare("DELETE FROM jobs WHERE id = ?1").bind(1, j.id).run();
  }
  tx.commit();
  return Result<std::vector<JobRecord>>::success(std::move(found));
}

void JobDb::transition_locked(int64_t job_id, const std::string& secondary_status,
                              const std::string& message, double now) {
  db_->prepare("UPDATE transitions SET end_time = ?2 WHERE job_id = ?1 AND end_time IS NULL")
      .bind(1, job_id)
      .bind(2, now)
      .run();
  db_->prepare(
         "INSERT INTO transitions (job_id, seq, status, start_time, message) "
         "VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM transitions WHERE job_id = ?1), "
         "?2, ?3, ?4)")
      .bind(1, job_id)
      .bind(2, secondary_status)
      .bind(3, now)
      .bind(4, message)
      .run();
  db_->prepare("UPDATE jobs SET secondary_status = ?2 WHERE id = ?1")
      .bind(1, job_id)
      .bind(2, secondary_status)
      .run();
}

void JobDb::transition(int64_t job_id, const std::string& secondary_status,
                       const std::string& message, const std::string& primary) {
  SqliteTransaction tx(*db_);
  transition_locked(job_id, secondary_status, message, unix_now());
  if (!primary.empty())
    db_->prepare("UPDATE jobs SET status = ?2 WHERE id = ?1")
        .bind(1, job_id)
        .bind(2, primary)
        .run();
  tx.commit();
}

void JobDb::update_progress(int64_t job_id, const JobProgress& p) {
  SqliteTransaction tx(*db_);
  write_progress(*db_, job_id, p);
  tx.commit();
}

void JobDb::finish(int64_t job_id, const JobEnd& end) {
  const double now = unix_now();
  SqliteTransaction tx(*db_);
  transition_locked(job_id, end.secondary, end.message, now);
  // The final transition is a state, not a phase: it has no end.
  write_progress(*db_, job_id, end.progress);
  db_->prepare(
         "UPDATE jobs SET status = ?2, failure_reason = ?3, exit_code = ?4, end_time = ?5 "
         "WHERE id = ?1")
      .bind(1, job_id)
      .bind(2, end.status)
      .bind(3, end.failure_reason)
      .bind(4, end.exit_code)
      .bind(5, now)
      .run();
  tx.commit();
}

Result<StopRequest> JobDb::request_stop(const std::string& name) {
  Result<JobRecord> job = find_job(name);
  if (!job.ok()) return Result<StopRequest>::failure(job.error());
  const double now = unix_now();
  SqliteTransaction tx(*db_);
  std::string current;
  bool alive = false;
  {
    SqliteStatement s = db_->prepare(
        "SELECT status, supervisor_pid, supervisor_start FROM jobs WHERE id = ?1");
    s.bind(1, job.value().id);
    if (!s.step()) return Result<StopRequest>::failure("no job named '" + name + "'");
    current = s.text(0);
    alive = process_start_ticks(static_cast<pid_t>(s.int64(1))) == s.int64(2);
  }
  if (current != status::kInProgress && current != status::kStopping)
    return Result<StopRequest>::success(StopRequest::kAlreadyEnded);
  if (!alive) {
    transition_locked(job.value().id, secondary::kStopped,
                      "Stopped by heft stop; its supervisor was no longer running", now);
    db_->prepare("UPDATE jobs SET status = ?2, end_time = ?3, stop_requested = 1 WHERE id = ?1")
        .bind(1, job.value().id)
        .bind(2, status::kStopped)
        .bind(3, now)
        .run();
    tx.commit();
    return Result<StopRequest>::success(StopRequest::kOrphanStopped);
  }
  db_->prepare("UPDATE jobs SET stop_requested = 1, status = ?2 WHERE id = ?1")
      .bind(1, job.value().id)
      .bind(2, status::kStopping)
      .run();
  tx.commit();
  return Result<StopRequest>::success(StopRequest::kRequested);
}

bool JobDb::stop_requested(int64_t job_id) {
  SqliteStatement s = db_->prepare("SELECT stop_requested FROM jobs WHERE id = ?1");
  s.bind(1, job_id);
  return s.step() && s.int64(0) != 0;
}

std::vector<Transition> JobDb::transitions(int64_t job_id) {
  SqliteStatement s = db_->prepare(
      "SELECT status, start_time, end_time, message FROM transitions WHERE job_id = ?1 "
      "ORDER BY seq");
  s.bind(1, job_id);
  std::vector<Transition> out;
  while (s.step()) out.push_back({s.text(0), s.real(1), s.optional_real(2), s.text(3)});
  return out;
}

int JobDb::fail_orphaned_jobs() {
  std::vector<std::pair<int64_t, int64_t>> orphans;  // job id, supervisor pid
  {
    SqliteStatement s = db_->prepare(
        "SELECT id, supervisor_pid, supervisor_start FROM jobs "
        "WHERE status IN ('InProgress', 'Stopping')");
    while (s.step())
      if (process_start_ticks(static_cast<pid_t>(s.int64(1))) != s.int64(2))
        orphans.emplace_back(s.int64(0), s.int64(1));
  }
  int n = 0;
  for (const auto& [id, pid] : orphans) {
    const double now = unix_now();
    try {
      SqliteTransaction tx(*db_);
      // Re-checked inside the transaction: the job may have ended meanwhile.
      {
        SqliteStatement s = db_->prepare(
            "SELECT 1 FROM jobs WHERE id = ?1 AND status IN ('InProgress', 'Stopping')");
        s.bind(1, id);
        if (!s.step()) continue;
      }
      const std::string reason = "the supervisor (heft train, pid " + std::to_string(pid) +
                                 ") ended without recording how the job ended";
      transition_locked(id, secondary::kFailed, reason, now);
      db_->prepare("UPDATE jobs SET status = ?2, failure_reason = ?3, end_time = ?4 WHERE id = ?1")
          .bind(1, id)
          .bind(2, status::kFailed)
          .bind(3, reason)
          .bind(4, now)
          .run();
      tx.commit();
      ++n;
    } catch (const NoSpace& e) {
      // A read (heft jobs, describe, logs) must still answer on a full disk: the job is shown
      // as recorded, and a later command records its end once there is space.
      std::cerr << "heft: warning: cannot record that job " << id << "'s supervisor (pid " << pid
                << ") ended: " << e.what() << std::endl;
      break;
    }
  }
  return n;
}

std::string local_time_text(double unix_seconds) {
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm tm {};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string timestamped_name(const std::string& base_name, double unix_seconds, int counter) {
  const long long total_ms = std::llround(unix_seconds * 1000);  // 0.788 s is 788 ms
  const time_t t = static_cast<time_t>(total_ms / 1000);
  const int ms = static_cast<int>(total_ms % 1000);
  struct tm tm {};
  ::gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d-%H-%M-%S", &tm);
  char millis[16];
  std::snprintf(millis, sizeof(millis), "-%03d", ms);
  std::string name = base_name + "-" + buf + millis;
  if (counter > 1) name += "-" + std::to_string(counter);
  return name;
}

}  // namespace heft::job
