// ctest-labels: multiproc
// Tests of the job supervisor (src/heft/job/supervisor.h) used as a library, with shell and
// Python workers: failure reasons, retries, max runtime, simulated spot interruptions that
// resume from checkpoints, metric points for every matched line, the worker environment.
// End-to-end tests through the `heft` binary (stop from another process, concurrent
// readers) are tests/cli/train_test.cc.
#include "heft/job/supervisor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "heft/job/spec/spec_env.h"
#include "support/files.h"

namespace heft::job {
namespace {

namespace fs = std::filesystem;

const std::string kCounter = HEFT_SOURCE_DIR "/tests/job/counter_job.py";

using heft::test::TempDir;

using heft::test::read_file;

struct Ran {
  int exit_code = -1;
  double seconds = 0;
  JobRecord job;
  std::vector<Transition> transitions;
  std::vector<MetricPoint> metrics;
  JobPaths paths;

  std::string statuses() const {
    std::string s;
    for (const Transition& t : transitions) s += (s.empty() ? "" : " ") + t.status;
    return s;
  }
};

// Runs the spec as `heft train` would, with HEFT_HOME = home, and reads back the record.
Ran run_job(const std::string& home, const std::string& yaml) {
  const Result<JobSpec> spec = parse_spec(yaml, "test.yaml");
  HEFT_CHECK(spec.ok(), spec.error());
  auto db = JobDb::open(database_path(home));
  Ran ran;
  ran.paths = job_paths(home, spec.value().name);
  HEFT_CHECK(make_job_dirs(ran.paths).ok());
  JobRecord job = db->create_job(spec.value().name, spec_to_json(spec.value()), ran.paths.root,
                                 spec.value().cluster.instance_count, spec.value().world_size())
                      .value();
  const auto command = worker_command(spec.value(), "/nonexistent");
  HEFT_CHECK(command.ok(), command.error());
  SupervisorOptions options;
  options.echo = false;
  const auto start = std::chrono::steady_clock::now();
  ran.exit_code = Supervisor(*db, job, spec.value(), ran.paths, command.value(), options).run();
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ran.job = db->find_job(spec.value().name).value();
  ran.transitions = db->transitions(ran.job.id);
  ran.metrics = db->metrics(ran.job.id);
  return ran;
}

std::string sh_job(const std::string& name, const std::string& script,
                   const std::string& extra = "") {
  return "name: " + name + "\nentry_point: [/bin/sh, -c, '" + script + "', sh]\n" +
         "cluster: {processes_per_host: 2}\n" +
         (extra.find("stopping:") == std::string::npos ? "stopping: {grace_s: 1}\n" : "") +
         extra;
}

TEST(Supervisor, FailingWorkerFailsTheJobWithItsExitCodeAndLastLines) {
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("fail", "echo starting; if [ $RANK = 1 ]; then echo out of memory >&2; "
                                       "exit 7; fi; sleep 30"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.status, "Failed");
  EXPECT_EQ(r.job.secondary_status, "Failed");
  EXPECT_EQ(r.job.failure_reason,
            "rank 1 exited with code 7; last lines of logs/rank-1.log:\nstarting\nout of memory");
  EXPECT_EQ(r.statuses(), "Starting Training Failed");
  EXPECT_EQ(r.job.attempts, 1);
  EXPECT_LT(r.seconds, 10);  // rank 0's sleep was cut short
  EXPECT_EQ(read_file(r.paths.rank_log(1)), "starting\nout of memory\n");
}

TEST(Supervisor, FailureFileWinsOverTheLogAndIsCutAt1024Bytes) {
  TempDir home;
  const Ran r = run_job(
      home.path(),
      sh_job("failfile", "if [ $RANK = 0 ]; then printf \"CUDA error: %02000d\" 0 > "
                         "$SM_OUTPUT_DIR/failure; echo noise; kill -9 $$; fi"));
  EXPECT_EQ(r.exit_code, kExitFailed);
  const std::string prefix = "rank 0 was killed by signal 9 (SIGKILL): CUDA error: 000";
  EXPECT_EQ(r.job.failure_reason.substr(0, prefix.size()), prefix);
  EXPECT_EQ(r.job.failure_reason.size(), prefix.size() - 3 + 1024 - 12);
  EXPECT_EQ(r.job.failure_reason.find("noise"), std::string::npos);
}

TEST(Supervisor, RetryRestartsAFailedGroupUpToMaxAttempts) {
  TempDir home;
  const Ran r = run_job(home.path(),
                        sh_job("retry", "echo restart=$TORCHELASTIC_RESTART_COUNT; sleep 0.2; "
                                        "[ $TORCHELASTIC_RESTART_COUNT -ge 2 ] || exit 3",
                               "retry: {max_attempts: 3}\n"));
  EXPECT_EQ(r.exit_code, kExitCompleted) << r.job.failure_reason;
  EXPECT_EQ(r.job.attempts, 3);
  EXPECT_EQ(r.statuses(),
            "Starting Training Restarting Training Restarting Training Uploading Completed");
  EXPECT_NE(r.transitions[2].message.find("Attempt 1 of 3 failed: rank"), std::string::npos)
      << r.transitions[2].message;
  EXPECT_EQ(read_file(r.paths.rank_log(0)), "restart=0\nrestart=1\nrestart=2\n");

  const Ran gave_up = run_job(home.path(), sh_job("retry-out", "exit 3", "retry: {max_attempts: 2}\n"));
  EXPECT_EQ(gave_up.exit_code, kExitFailed);
  EXPECT_EQ(gave_up.job.attempts, 2);
  EXPECT_NE(gave_up.job.failure_reason.find("exited with code 3"), std::string::npos);
}

TEST(Supervisor, MaxRuntimeStopsTheGroup) {
  TempDir home;
  const Ran r = run_job(home.path(), sh_job("slow", "echo up; sleep 30",
                                            "stopping: {max_runtime_s: 0.5, grace_s: 1}\n"));
  EXPECT_EQ(r.exit_code, kExitStopped);
  EXPECT_EQ(r.job.status, "Stopped");
  EXPECT_EQ(r.job.secondary_status, "MaxRuntimeExceeded");
  EXPECT_EQ(r.statuses(), "Starting Training Stopping MaxRuntimeExceeded");
  EXPECT_LT(r.seconds, 5);
  EXPECT_GE(r.job.billable_seconds, 0.5);
  EXPECT_TRUE(r.job.failure_reason.empty());
}

TEST(Supervisor, WorkersIgnoringSigtermAreKilledAfterTheGrace) {
  TempDir home;
  const Ran r = run_job(home.path(), sh_job("stubborn", "trap \"\" TERM; sleep 30 & wait; sleep 30",
                                            "stopping: {max_runtime_s: 0.3, grace_s: 0.5}\n"));
  EXPECT_EQ(r.exit_code, kExitStopped);
  EXPECT_EQ(r.job.secondary_status, "MaxRuntimeExceeded");
  EXPECT_LT(r.seconds, 5);
}

std::string counter_job(const std::string& name, const std::string& extra) {
  return "name: " + name + "\nentry_point: [" HEFT_PYTHON ", -u, " + kCounter + "]\n" +
         "hyperparameters: {steps: 16, sleep: 0.05}\n"
         "cluster: {processes_per_host: 2}\n"
         "metric_definitions: [{name: value, regex: '^final: .*value=([0-9]+)'},"
         " {name: step_value, regex: '^step=[0-9]+ value=([0-9]+)'}]\n"
         "stopping: {grace_s: 5}\n" + extra;
}

double final_value(const Ran& r, int rank) {
  for (const MetricPoint& p : r.metrics)
    if (p.name == "value" && p.rank == rank) return p.value;
  return -1;
}

TEST(Supervisor, SpotInterruptionsRestartFromCheckpointsAndEndLikeAnUninterruptedRun) {
  TempDir home;
  const Ran plain = run_job(home.path(), counter_job("plain", ""));
  ASSERT_EQ(plain.exit_code, kExitCompleted) << plain.job.failure_reason;
  EXPECT_EQ(plain.job.interruptions, 0);

  const Ran spot = run_job(home.path(),
                           counter_job("spot", "spot: {enabled: true, simulate: {every_s: 0.4, count: 2}}\n"));
  ASSERT_EQ(spot.exit_code, kExitCompleted) << spot.job.failure_reason;
  EXPECT_EQ(spot.job.status, "Completed");
  EXPECT_EQ(spot.job.interruptions, 2);
  EXPECT_EQ(spot.job.attempts, 3);
  EXPECT_EQ(spot.statuses(),
            "Starting Training Interrupted Restarting Training Interrupted Restarting Training "
            "Uploading Completed");
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(final_value(plain, rank), 0);
    EXPECT_EQ(final_value(spot, rank), final_value(plain, rank)) << "rank " << rank;
    const std::string log = read_file(spot.paths.rank_log(rank));
    EXPECT_NE(log.find("restart=1"), std::string::npos) << log;
    EXPECT_NE(log.find("restart=2"), std::string::npos) << log;
  }
  EXPECT_LE(spot.job.billable_seconds, spot.job.training_seconds + 1e-6);
}

TEST(Supervisor, StoresAMetricPointForEveryMatchedLine) {
  TempDir home;
  const Ran r = run_job(
      home.path(),
      "name: m\nentry_point: [/bin/sh, -c, 'i=0; while [ $i -lt 50 ]; do i=$((i+1)); "
      "echo \"step=$i loss=0.$i\"; echo \"noise $i\"; done; echo \"acc=0.9\" >&2']\n"
      "cluster: {instance_count: 2, processes_per_host: 2}\n"
      "metric_definitions: [{name: loss, regex: 'loss=([0-9.]+)'}, {name: acc, regex: "
      "'acc=([0-9.]+)'}]\n");
  ASSERT_EQ(r.exit_code, kExitCompleted);
  int loss = 0, acc = 0;
  for (const MetricPoint& p : r.metrics) {
    if (p.name == "loss") {
      ++loss;
      ASSERT_TRUE(p.step.has_value());
      EXPECT_DOUBLE_EQ(p.value, std::stod("0." + std::to_string(*p.step)));
    } else {
      ++acc;
      EXPECT_FALSE(p.step.has_value());
      EXPECT_DOUBLE_EQ(p.value, 0.9);
    }
  }
  EXPECT_EQ(loss, 4 * 50);
  EXPECT_EQ(acc, 4);
}

TEST(Supervisor, WorkersGetTheJobEnvironmentAndHyperparameterArguments) {
  TempDir home;
  TempDir data;
  const Ran r = run_job(
      home.path(),
      "name: env-job\nentry_point: [/bin/sh, -c, 'env > $SM_OUTPUT_DATA_DIR/env-$RANK; echo \"$@\" "
      "> $SM_OUTPUT_DATA_DIR/args-$RANK', sh]\n"
      "hyperparameters: {lr: 0.050, model: cnn, epochs: 2}\n"
      "inputs: {train: " + data.path() + "}\n"
      "distribution: {dataparallel: {enabled: true}}\n"
      "checkpoint: {every_steps: 7}\n"
      "environment: {MY_VAR: hello}\n");
  ASSERT_EQ(r.exit_code, kExitCompleted) << r.job.failure_reason;
  const std::string env = read_file(r.paths.output_data + "/env-0");
  const std::string root = r.paths.root;
  for (const std::string& line : std::vector<std::string>{
           "SM_HPS={\"epochs\":2,\"lr\":0.05,\"model\":\"cnn\"}", "SM_HP_LR=0.050", "SM_HP_MODEL=cnn",
        "SM_CHANNELS=[\"train\"]", "SM_CHANNEL_TRAIN=" + data.path(), "SM_MODEL_DIR=" + root + "/model",
        "SM_OUTPUT_DIR=" + root + "/output", "SM_OUTPUT_DATA_DIR=" + root + "/output/data",
        "SM_CHECKPOINT_DIR=" + root + "/checkpoints", "HEFT_JOB=env-job",
        "HEFT_DISTRIBUTION={\"dataparallel\":{\"enabled\":true}}",
        "HEFT_CHECKPOINT={\"every_steps\":7,\"keep\":2}", "TORCHELASTIC_RESTART_COUNT=0",
        "MY_VAR=hello", "RANK=0", "WORLD_SIZE=1"})
    EXPECT_NE(env.find("\n" + line + "\n"), std::string::npos) << line << " not in:\n" << env;
  EXPECT_EQ(read_file(r.paths.output_data + "/args-0"), "--epochs 2 --lr 0.050 --model cnn\n");
}

TEST(Supervisor, MissingCommandFailsTheJobWithoutStartingIt) {
  TempDir home;
  const Ran r = run_job(home.path(), "name: nocmd\nentry_point: [pyhton3, train.py]\n");
  EXPECT_EQ(r.exit_code, kExitFailed);
  EXPECT_EQ(r.job.failure_reason, "cannot execute 'pyhton3': No such file or directory");
  EXPECT_EQ(r.job.attempts, 0);
}

TEST(Supervisor, BuiltinTrainerMustBeBuiltNextToHeft) {
  const Result<JobSpec> spec = parse_spec("name: a\nentry_point: heft-train\n", "s.yaml");
  ASSERT_TRUE(spec.ok());
  const auto command = worker_command(spec.value(), "/nonexistent");
  ASSERT_FALSE(command.ok());
  EXPECT_NE(command.error().find("the built-in trainer is not built (expected the executable "
                                 "/nonexistent/heft-train next to heft"),
            std::string::npos)
      << command.error();
}

// The training time of a Failed (or Stopped) job that `heft resume` started again is the sum
// of its runs: the wall clock from its first start to its end less the time it sat ended.
TEST(Supervisor, AResumedJobsTrainingTimeLeavesOutTheTimeItSatStopped) {
  TempDir home;
  const std::string yaml = sh_job("resumed", "sleep 0.3; [ -e \"$SM_CHECKPOINT_DIR/go\" ]");
  const Ran first = run_job(home.path(), yaml);
  ASSERT_EQ(first.exit_code, kExitFailed) << first.job.failure_reason;
  ASSERT_TRUE(first.job.end_time && first.job.training_start);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the job sits Failed
  std::ofstream(first.paths.checkpoints + "/go") << "";

  auto db = JobDb::open(database_path(home.path()));
  const double resumed_at = unix_now();
  const Result<JobRecord> job = db->resume_job("resumed");
  ASSERT_TRUE(job.ok()) << job.error();
  const Result<JobSpec> spec = spec_from_json(job.value().spec, "job 'resumed'");
  ASSERT_TRUE(spec.ok()) << spec.error();
  const auto command = worker_command(spec.value(), "/nonexistent");
  ASSERT_TRUE(command.ok()) << command.error();
  SupervisorOptions options;
  options.echo = false;
  EXPECT_EQ(Supervisor(*db, job.value(), spec.value(), first.paths, command.value(), options).run(),
            kExitCompleted);
  const JobRecord after = db->find_job("resumed").value();
  EXPECT_EQ(after.attempts, 2);
  EXPECT_DOUBLE_EQ(*after.training_start, *first.job.training_start);
  const double wall = *after.end_time - *after.training_start;
  const double sat_ended = resumed_at - *first.job.end_time;
  ASSERT_GE(sat_ended, 1.5);
  EXPECT_GE(after.training_seconds, first.job.training_seconds + 0.2);  // + the 0.3 s run
  EXPECT_LE(after.training_seconds, wall - sat_ended + 1e-6)
      << "training " << after.training_seconds << " s, wall " << wall << " s, of which "
      << sat_ended << " s ended";
  EXPECT_LE(after.billable_seconds, after.training_seconds + 1e-6);
}

}  // namespace
}  // namespace heft::job
