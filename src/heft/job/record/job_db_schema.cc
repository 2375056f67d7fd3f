// The job database's schema, its versions and migrations, and how a database is opened
// (job_db.h). The schema below is the one docs/jobs.md documents; keep the two in step.
#include "heft/job/record/job_db.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "heft/error.h"
#include "heft/job/record/sqlite.h"

namespace heft::job {

namespace {

// 1: the first; 2: jobs.base_name.
constexpr int kSchemaVersion = 2;
constexpr int kBusyTimeoutMs = 30000;

const char* const kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id               INTEGER PRIMARY KEY,
  name             TEXT    NOT NULL UNIQUE,
  base_name        TEXT    NOT NULL DEFAULT '',
  status           TEXT    NOT NULL,
  secondary_status TEXT    NOT NULL,
  failure_reason   TEXT    NOT NULL DEFAULT '',
  spec             TEXT    NOT NULL,
  job_dir          TEXT    NOT NULL,
  instance_count   INTEGER NOT NULL,
  world_size       INTEGER NOT NULL,
  created_at       REAL    NOT NULL,
  training_start   REAL,
  end_time         REAL,
  attempts         INTEGER NOT NULL DEFAULT 0,
  interruptions    INTEGER NOT NULL DEFAULT 0,
  training_seconds REAL    NOT NULL DEFAULT 0,
  billable_seconds REAL    NOT NULL DEFAULT 0,
  exit_code        INTEGER,
  supervisor_pid   INTEGER NOT NULL,
  supervisor_start INTEGER NOT NULL,
  stop_requested   INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS transitions (
  job_id     INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  seq        INTEGER NOT NULL,
  status     TEXT    NOT NULL,
  start_time REAL    NOT NULL,
  end_time   REAL,
  message    TEXT    NOT NULL DEFAULT '',
  PRIMARY KEY (job_id, seq)
);
CREATE TABLE IF NOT EXISTS metrics (
  id        INTEGER PRIMARY KEY,
  job_id    INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  name      TEXT    NOT NULL,
  rank      INTEGER NOT NULL,
  timestamp REAL    NOT NULL,
  step      INTEGER,
  value     REAL
);
CREATE INDEX IF NOT EXISTS metrics_by_job_name ON metrics(job_id, name, id);
CREATE TABLE IF NOT EXISTS findings (
  id        INTEGER PRIMARY KEY,
  job_id    INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  rule      TEXT    NOT NULL,
  rank      INTEGER NOT NULL,
  timestamp REAL    NOT NULL,
  message   TEXT    NOT NULL,
  evidence  TEXT    NOT NULL DEFAULT '{}',
  action    TEXT    NOT NULL DEFAULT 'none'
);
CREATE INDEX IF NOT EXISTS findings_by_job ON findings(job_id, id);
)sql";

// Every version's indexes over columns a migration may have added.
const char* const kLateIndexes =
    "CREATE INDEX IF NOT EXISTS jobs_by_base_name ON jobs(base_name, id);";

}  // namespace

std::unique_ptr<JobDb> JobDb::open(const std::string& path) {
  auto db = std::make_unique<SqliteDb>(path, kBusyTimeoutMs);
  // WAL: readers see the last commit and never block the writer; NORMAL sync is durable
  // against a process crash (the case that matters: a killed supervisor). Switching a new
  // database to WAL takes an exclusive lock, and SQLite answers "database is locked" at
  // once, without its busy handler, while another process does the same (two `heft train`
  // started together on a fresh home, as `heft tune` does): retry within the busy timeout.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (int attempt = 0; !db->exec_unless_busy("PRAGMA journal_mode=WAL"); ++attempt) {
    // Past the deadline, exec() names the lock in its error.
    if (std::chrono::steady_clock::now() >= deadline) db->exec("PRAGMA journal_mode=WAL");
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + 5 * std::min(attempt, 10)));
  }
  db->exec("PRAGMA synchronous=NORMAL");
  db->exec("PRAGMA foreign_keys=ON");
  std::unique_ptr<JobDb> jobs(new JobDb(std::move(db)));
  jobs->create_schema();
  return jobs;
}

JobDb::JobDb(std::unique_ptr<SqliteDb> db) : db_(std::move(db)) {}
JobDb::~JobDb() = default;

void JobDb::create_schema() {
  auto read_version = [this] {
    SqliteStatement s = db_->prepare("PRAGMA user_version");
    return s.step() ? static_cast<int>(s.int64(0)) : 0;
  };
  if (read_version() == kSchemaVersion) return;
  SqliteTransaction tx(*db_);
  // Read again under the write lock: another process may have created or migrated it.
  const int version = read_version();
  if (version == kSchemaVersion) return;
  if (version > kSchemaVersion)
    throw IoError("job database " + db_->path() + ": schema version " +
                  std::to_string(version) + " is newer than this heft's (" +
                  std::to_string(kSchemaVersion) + ")");
  if (version == 0)
    db_->exec(kSchema);
  else
    migrate(version);
  db_->exec(kLateIndexes);
  db_->exec("PRAGMA user_version=" + std::to_string(kSchemaVersion));
  tx.commit();
}

void JobDb::migrate(int from_version) {
  if (from_version < 2)
    db_->exec("ALTER TABLE jobs ADD COLUMN base_name TEXT NOT NULL DEFAULT ''");
}

}  // namespace heft::job
