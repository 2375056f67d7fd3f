// ctest-labels: unit
// A worker's output as the supervisor keeps it (job/job_output.h): the tail that a failed
// job's reason quotes holds a long last line whole (a regression test: heft-train's unknown
// setting message, 700 characters, was cut mid-word at 300); a log a worker left as a FIFO
// or a link (seen by heft resume) is refused at once, naming it, never waited on or followed.
#include "heft/job/job_output.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "heft/error.h"

#include "support/files.h"

namespace heft::job {
namespace {

TEST(JobOutput, TailKeepsTheLastLineWholeAndOlderLinesWhileTheyFit) {
  test::TempDir home("heft-job-output");
  const JobPaths paths = job_paths(home.path(), "tail");
  ASSERT_TRUE(make_job_dirs(paths).ok());
  const Result<JobSpec> spec = parse_spec("name: tail\nentry_point: [/bin/true]\n", "s.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  JobOutput out(paths, spec.value(), false, false, ProgressLine("tail", std::nullopt, std::nullopt));
  std::string long_line = "heft-train: unknown hyperparameter 'colour'; known:";
  while (long_line.size() < 700) long_line += " bf16_compression,";
  long_line += " the_end";
  out.line(0, true, "step=1 loss=2.0", 0);
  out.line(0, true, long_line, 0);
  const std::string tail = out.tail(0);
  EXPECT_EQ(tail, "step=1 loss=2.0\n" + long_line);

  // Past 4 KiB a line is cut, and says so.
  out.line(0, true, std::string(5000, 'x'), 0);
  const std::string cut = out.tail(0);
  EXPECT_EQ(cut, std::string(4096, 'x') + " [... 904 more bytes]");
  EXPECT_EQ(test::read_file(paths.rank_log(0)).size(),
            std::string("step=1 loss=2.0\n").size() + long_line.size() + 1 + 5001);
}

TEST(JobOutput, ALogLeftAsAFifoOrALinkIsRefusedNamingIt) {
  test::TempDir home("heft-job-output");
  const JobPaths paths = job_paths(home.path(), "vandal");
  ASSERT_TRUE(make_job_dirs(paths).ok());
  const Result<JobSpec> spec = parse_spec("name: vandal\nentry_point: [/bin/true]\n", "s.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  const std::string log = paths.rank_log(0);
  for (const char* kind : {"a FIFO", "a symbolic link"}) {
    ::unlink(log.c_str());
    ASSERT_EQ(std::string(kind) == "a FIFO" ? ::mkfifo(log.c_str(), 0600)
                                            : ::symlink("/dev/null", log.c_str()),
              0);
    const auto start = std::chrono::steady_clock::now();
    try {
      JobOutput out(paths, spec.value(), false, false,
                    ProgressLine("vandal", std::nullopt, std::nullopt));
      ADD_FAILURE() << "a log that is " << kind << " was opened";
    } catch (const IoError& e) {
      EXPECT_EQ(std::string(e.what()), "cannot open the log " + log + ": it is " + kind +
                                           ", not a regular file: remove it to run the job again");
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  }
}

}  // namespace
}  // namespace heft::job
