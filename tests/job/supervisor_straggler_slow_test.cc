// ctest-labels: slow
// A rank 0 that saves a model for 10 s after the other ranks exited 0 completes the job under
// the default stopping.straggler_grace_s (300 s): the grace is for exactly this
// (launch/straggler_watch.h; the fast cases with small graces are straggler_test.cc).
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "heft/job/spec/spec_env.h"
#include "heft/job/supervisor.h"
#include "support/files.h"

namespace heft::job {
namespace {

TEST(Stragglers, RankZeroSavingForTenSecondsUnderTheDefaultGraceCompletes) {
  test::TempDir home;
  const Result<JobSpec> spec = parse_spec(
      "name: slow-saver\nentry_point: [/bin/sh, -c, 'if [ $RANK = 0 ]; then sleep 10; "
      "echo saved > $SM_MODEL_DIR/model; fi', sh]\ncluster: {processes_per_host: 3}\n",
      "test.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  EXPECT_EQ(spec.value().stopping.straggler_grace_s, 300);
  auto db = JobDb::open(database_path(home.path()));
  const JobPaths paths = job_paths(home.path(), "slow-saver");
  ASSERT_TRUE(make_job_dirs(paths).ok());
  JobRecord job = db->create_job("slow-saver", spec_to_json(spec.value()), paths.root, 1, 3).value();
  SupervisorOptions options;
  options.echo = false;
  const auto start = std::chrono::steady_clock::now();
  const int code = Supervisor(*db, job, spec.value(), paths,
                              worker_command(spec.value(), "/nonexistent").value(), options)
                       .run();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const JobRecord ended = db->find_job("slow-saver").value();
  EXPECT_EQ(code, kExitCompleted) << ended.failure_reason;
  EXPECT_EQ(ended.status, "Completed");
  EXPECT_GE(seconds, 10);
  EXPECT_EQ(test::read_file(paths.model + "/model"), "saved\n");
}

}  // namespace
}  // namespace heft::job
