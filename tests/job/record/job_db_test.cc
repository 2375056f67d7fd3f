// ctest-labels: multiproc
// Tests of the job database (src/heft/job/record/job_db.h): unique names, transitions with
// timestamps, metric series and final values, stop requests (running and orphaned
// supervisors), concurrent writers in separate processes losing nothing, deleting jobs,
// base names and the migration of a version 1 database.
#include "heft/job/record/job_db.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>

#include "heft/job/paths.h"
#include "heft/job/record/sqlite.h"
#include "support/files.h"

namespace heft::job {
namespace {

namespace fs = std::filesystem;

using heft::test::TempDir;

JobRecord create(JobDb& db, const std::string& name) {
  Result<JobRecord> r = db.create_job(name, {{"name", name}}, "/tmp/" + name, 2, 4);
  HEFT_CHECK(r.ok(), r.error());
  return r.value();
}

// Runs `body` in a forked child (its own connection) and returns its exit code.
template <class F>
pid_t fork_child(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 1;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
    }
    ::_exit(code);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

TEST(JobDb, CreatesAJobStartingAndRefusesATakenName) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const JobRecord job = create(*db, "fashion-cnn");
  EXPECT_EQ(job.status, "InProgress");
  EXPECT_EQ(job.secondary_status, "Starting");
  EXPECT_EQ(job.world_size, 4);
  EXPECT_EQ(job.spec["name"], "fashion-cnn");
  EXPECT_FALSE(job.ended());

  const Result<JobRecord> again = db->create_job("fashion-cnn", {}, "/tmp/x", 1, 1);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().find("a job named 'fashion-cnn' already exists (InProgress, created "),
            std::string::npos)
      << again.error();
  EXPECT_NE(again.error().find("choose another with --name"), std::string::npos);

  const Result<JobRecord> missing = db->find_job("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error(), "no job named 'nope' (heft jobs lists them)");
}

// Regression: two processes opening a fresh database at once (two `heft train` started
// together by `heft tune`) failed one of them with "database is locked (PRAGMA
// journal_mode=WAL)".
TEST(JobDb, TwoProcessesOpeningAFreshDatabaseAtOnceBothSucceed) {
  for (int round = 0; round < 20; ++round) {
    TempDir home;
    const std::string path = home.path() + "/heft.db";
    std::vector<pid_t> children;
    for (int c = 0; c < 3; ++c) {
      const pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        try {
          auto db = JobDb::open(path);
          const bool ok = db->create_job("job-" + std::to_string(c), nlohmann::json::object(), "/tmp", 1, 1).ok();
          _exit(ok ? 0 : 3);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "child %d: %s\n", c, e.what());
          _exit(2);
        }
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
    EXPECT_EQ(JobDb::open(path)->list_jobs().size(), 3u);
  }
}

TEST(JobDb, ListsNewestFirstAndSurvivesReopening) {
  TempDir dir;
  {
    auto db = JobDb::open(database_path(dir.path()));
    create(*db, "a");
    create(*db, "b");
  }
  auto db = JobDb::open(database_path(dir.path()));
  const auto jobs = db->list_jobs();
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].name, "b");
  EXPECT_EQ(jobs[1].name, "a");
}

TEST(JobDb, TransitionsCarryTimestampsAndTheLastHasNoEnd) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const JobRecord job = create(*db, "j");
  db->transition(job.id, secondary::kTraining, "Training with 4 workers");
  db->transition(job.id, secondary::kInterrupted, "spot", "");
  db->transition(job.id, secondary::kRestarting, "restart 1");
  db->update_progress(job.id, {2, 1, 3.5, 3.0, 1000.0});
  db->finish(job.id, {status::kCompleted, secondary::kCompleted, "done", "", 0,
                      {2, 1, 4.0, 3.5, 1000.0}});
  const auto t = db->transitions(job.id);
  ASSERT_EQ(t.size(), 5u);
  const std::vector<std::string> names = {"Starting", "Training", "Interrupted", "Restarting",
                                          "Completed"};
  for (size_t i = 0; i < t.size(); ++i) {
    EXPECT_EQ(t[i].status, names[i]);
    if (i + 1 < t.size()) {
      ASSERT_TRUE(t[i].end_time.has_value()) << i;
      EXPECT_LE(t[i].start_time, *t[i].end_time);
      EXPECT_DOUBLE_EQ(*t[i].end_time, t[i + 1].start_time);
    }
  }
  EXPECT_FALSE(t.back().end_time.has_value());
  const JobRecord done = db->find_job("j").value();
  EXPECT_EQ(done.status, "Completed");
  EXPECT_EQ(done.secondary_status, "Completed");
  EXPECT_EQ(done.attempts, 2);
  EXPECT_EQ(done.interruptions, 1);
  EXPECT_DOUBLE_EQ(done.training_seconds, 4.0);
  EXPECT_DOUBLE_EQ(done.billable_seconds, 3.5);
  EXPECT_DOUBLE_EQ(*done.training_start, 1000.0);
  EXPECT_EQ(done.exit_code, 0);
  EXPECT_TRUE(done.ended());
}

TEST(JobDb, MetricsKeepEveryPointAndFinalValuesComeFromTheLowestRank) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const JobRecord job = create(*db, "j");
  const double nan = std::nan("");
  db->add_metrics(job.id, {{"train:loss", 1, 1.0, 1, 0.9},
                           {"train:loss", 0, 1.0, 1, 0.8},
                           {"train:loss", 0, 2.0, 2, 0.5},
                           {"train:loss", 1, 2.0, 2, 0.4},
                           {"test:acc", 0, 3.0, std::nullopt, 0.85},
                           {"weird", 0, 3.0, std::nullopt, nan}});
  const auto all = db->metrics(job.id);
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0].rank, 1);
  EXPECT_EQ(*all[0].step, 1);
  EXPECT_FALSE(all[4].step.has_value());
  EXPECT_TRUE(std::isnan(all[5].value));
  EXPECT_EQ(db->metrics(job.id, "train:loss").size(), 4u);
  const auto last = db->final_metrics(job.id);
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last[0].name, "test:acc");
  EXPECT_EQ(last[1].name, "train:loss");
  EXPECT_EQ(last[1].rank, 0);
  EXPECT_DOUBLE_EQ(last[1].value, 0.5);
}

TEST(JobDb, StopRequestReachesARunningSupervisor) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const JobRecord job = create(*db, "j");  // supervised by this (live) process
  EXPECT_FALSE(db->stop_requested(job.id));
  auto other = JobDb::open(database_path(dir.path()));
  const Result<StopRequest> r = other->request_stop("j");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value(), StopRequest::kRequested);
  EXPECT_TRUE(db->stop_requested(job.id));
  EXPECT_EQ(db->find_job("j").value().status, "Stopping");
  EXPECT_FALSE(other->request_stop("nope").ok());
  db->finish(job.id, {status::kStopped, secondary::kStopped, "stopped", "", 3, {}});
  EXPECT_EQ(other->request_stop("j").value(), StopRequest::kAlreadyEnded);
}

TEST(JobDb, OrphanedJobsAreStoppedOrFailedNotLeftRunning) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  JobDb::open(path);
  for (const char* name : {"orphan-a", "orphan-b"}) {
    const pid_t child = fork_child([&] {
      auto db = JobDb::open(path);
      return db->create_job(name, {}, "/tmp", 1, 1).ok() ? 0 : 1;
    });
    ASSERT_EQ(wait_child(child), 0);
  }
  auto db = JobDb::open(path);
  create(*db, "alive");
  EXPECT_EQ(db->request_stop("orphan-a").value(), StopRequest::kOrphanStopped);
  EXPECT_EQ(db->find_job("orphan-a").value().status, "Stopped");
  EXPECT_EQ(db->fail_orphaned_jobs(), 1);
  const JobRecord b = db->find_job("orphan-b").value();
  EXPECT_EQ(b.status, "Failed");
  EXPECT_NE(b.failure_reason.find("supervisor"), std::string::npos) << b.failure_reason;
  EXPECT_EQ(db->find_job("alive").value().status, "InProgress");
}

TEST(JobDb, ConcurrentWritersInSeparateProcessesLoseNothing) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  JobDb::open(path);
  constexpr int kWriters = 4, kBatches = 60, kPerBatch = 10;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    children.push_back(fork_child([&, w] {
      auto db = JobDb::open(path);
      const std::string name = "writer-" + std::to_string(w);
      const JobRecord job = db->create_job(name, {}, "/tmp", 1, 1).value();
      for (int b = 0; b < kBatches; ++b) {
        std::vector<MetricPoint> points;
        for (int i = 0; i < kPerBatch; ++i)
          points.push_back({"m", w, unix_now(), b * kPerBatch + i, double(i)});
        db->add_metrics(job.id, points);
        if (b % 10 == 0) db->transition(job.id, secondary::kTraining, "batch " + std::to_string(b));
      }
      return 0;
    }));
  }
  // Meanwhile this process reads, as `heft jobs` would.
  auto reader = JobDb::open(path);
  for (int i = 0; i < 50; ++i) {
    for (const JobRecord& j : reader->list_jobs()) (void)reader->metrics(j.id);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (pid_t c : children) EXPECT_EQ(wait_child(c), 0);
  const auto jobs = reader->list_jobs();
  ASSERT_EQ(jobs.size(), static_cast<size_t>(kWriters));
  for (const JobRecord& j : jobs) {
    const auto points = reader->metrics(j.id);
    ASSERT_EQ(points.size(), static_cast<size_t>(kBatches * kPerBatch)) << j.name;
    for (size_t i = 0; i < points.size(); ++i) ASSERT_EQ(*points[i].step, int64_t(i));
    EXPECT_EQ(reader->transitions(j.id).size(), 1u + kBatches / 10);
  }
}

TEST(JobDb, DeleteRemovesEveryRowOfTheJobAndRefusesARunningOne) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const JobRecord done = create(*db, "done");
  db->add_metrics(done.id, {{"train:loss", 0, 1.0, 1, 0.5}, {"system:cpu", 0, 1.0, {}, 9}});
  db->add_finding(done.id, {"StepOutlier", 0, 1.0, "slow step", {}, "none"});
  db->finish(done.id, {status::kCompleted, secondary::kCompleted, "done", "", 0, {}});
  const JobRecord running = create(*db, "running");  // InProgress, supervised by this process
  db->add_metrics(running.id, {{"train:loss", 0, 1.0, 1, 0.7}});
  const JobRecord stopping = create(*db, "stopping");
  ASSERT_EQ(db->request_stop("stopping").value(), StopRequest::kRequested);

  // One refused job: nothing at all is deleted.
  for (const char* refused : {"running", "stopping"}) {
    const auto r = db->delete_jobs({"done", refused});
    ASSERT_FALSE(r.ok()) << refused;
    EXPECT_NE(r.error().find("job '" + std::string(refused) + "' is "), std::string::npos)
        << r.error();
    EXPECT_NE(r.error().find("stop it first"), std::string::npos) << r.error();
    EXPECT_TRUE(db->has_job("done"));
    EXPECT_EQ(db->metrics(done.id).size(), 2u);
  }
  const auto r = db->delete_jobs({"done", "never-was"});
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r.value().size(), 1u);
  EXPECT_EQ(r.value()[0].name, "done");
  EXPECT_FALSE(db->find_job("done").ok());
  EXPECT_TRUE(db->metrics(done.id).empty());
  EXPECT_TRUE(db->findings(done.id).empty());
  EXPECT_TRUE(db->transitions(done.id).empty());
  // The others keep theirs.
  EXPECT_EQ(db->metrics(running.id).size(), 1u);
  EXPECT_EQ(db->list_jobs().size(), 2u);
  // The name is free again.
  EXPECT_TRUE(db->create_job("done", {}, "/tmp/done", 1, 1).ok());
}

TEST(JobDb, ABaseNameFindsItsNewestJobAndAnExactNameWins) {
  TempDir dir;
  auto db = JobDb::open(database_path(dir.path()));
  const std::string first = timestamped_name("fashion-cnn", 1795277295.788);
  const std::string second = timestamped_name("fashion-cnn", 1795277295.788, 2);
  EXPECT_EQ(first, "fashion-cnn-2026-11-21-16-08-15-788");
  EXPECT_EQ(second, "fashion-cnn-2026-11-21-16-08-15-788-2");
  EXPECT_EQ(timestamped_name("x", 1795277295.0004), "x-2026-11-21-16-08-15-000");
  ASSERT_TRUE(db->create_job(first, {}, "/tmp/a", 1, 1, "fashion-cnn").ok());
  ASSERT_TRUE(db->create_job(second, {}, "/tmp/b", 1, 1, "fashion-cnn").ok());
  create(*db, "other");
  EXPECT_EQ(db->find_job("fashion-cnn").value().name, second);
  EXPECT_EQ(db->find_job("fashion-cnn").value().base_name, "fashion-cnn");
  EXPECT_EQ(db->find_job(first).value().name, first);
  EXPECT_EQ(db->count_base_name("fashion-cnn"), 2);
  EXPECT_FALSE(db->has_job("fashion-cnn"));
  EXPECT_EQ(db->find_job("other").value().base_name, "");
  // A job named exactly so is found before the base name's jobs.
  create(*db, "fashion-cnn");
  EXPECT_TRUE(db->has_job("fashion-cnn"));
  EXPECT_EQ(db->find_job("fashion-cnn").value().name, "fashion-cnn");
}

TEST(JobDb, AVersion1DatabaseIsMigratedAndKeepsItsJobs) {
  TempDir dir;
  const std::string path = database_path(dir.path());
  {
    SqliteDb old(path, 1000);
    old.exec(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, status TEXT NOT "
        "NULL, secondary_status TEXT NOT NULL, failure_reason TEXT NOT NULL DEFAULT '', spec "
        "TEXT NOT NULL, job_dir TEXT NOT NULL, instance_count INTEGER NOT NULL, world_size "
        "INTEGER NOT NULL, created_at REAL NOT NULL, training_start REAL, end_time REAL, "
        "attempts INTEGER NOT NULL DEFAULT 0, interruptions INTEGER NOT NULL DEFAULT 0, "
        "training_seconds REAL NOT NULL DEFAULT 0, billable_seconds REAL NOT NULL DEFAULT 0, "
        "exit_code INTEGER, supervisor_pid INTEGER NOT NULL, supervisor_start INTEGER NOT NULL, "
        "stop_requested INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE transitions (job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE "
        "CASCADE, seq INTEGER NOT NULL, status TEXT NOT NULL, start_time REAL NOT NULL, "
        "end_time REAL, message TEXT NOT NULL DEFAULT '', PRIMARY KEY (job_id, seq));"
        "CREATE TABLE metrics (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES "
        "jobs(id) ON DELETE CASCADE, name TEXT NOT NULL, rank INTEGER NOT NULL, timestamp REAL "
        "NOT NULL, step INTEGER, value REAL);"
        "CREATE TABLE findings (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL REFERENCES "
        "jobs(id) ON DELETE CASCADE, rule TEXT NOT NULL, rank INTEGER NOT NULL, timestamp REAL "
        "NOT NULL, message TEXT NOT NULL, evidence TEXT NOT NULL DEFAULT '{}', action TEXT NOT "
        "NULL DEFAULT 'none');"
        "INSERT INTO jobs (name, status, secondary_status, spec, job_dir, instance_count, "
        "world_size, created_at, billable_seconds, supervisor_pid, supervisor_start) VALUES "
        "('old-job', 'Completed', 'Completed', '{}', '/tmp/old-job', 2, 4, 1000, 7.5, 1, 1);"
        "PRAGMA user_version=1;");
  }
  auto db = JobDb::open(path);
  const Result<JobRecord> old = db->find_job("old-job");
  ASSERT_TRUE(old.ok()) << old.error();
  EXPECT_EQ(old.value().base_name, "");
  EXPECT_DOUBLE_EQ(old.value().billable_seconds, 7.5);
  ASSERT_TRUE(db->create_job("new-1", {}, "/tmp/new-1", 1, 1, "new").ok());
  EXPECT_EQ(db->find_job("new").value().name, "new-1");
  db.reset();
  SqliteDb raw(path, 1000);
  SqliteStatement version = raw.prepare("PRAGMA user_version");
  ASSERT_TRUE(version.step());
  EXPECT_EQ(version.int64(0), 2);
  EXPECT_EQ(JobDb::open(path)->list_jobs().size(), 2u);  // opening again changes nothing
}

}  // namespace
}  // namespace heft::job
