// ctest-labels: multiproc
// /opt/ml for a job's workers (launch/opt_ml.h), with real processes: what a worker writes
// under /opt/ml lands in the job's folders; two workers of two jobs at once each see only
// their own; the machine's /opt is unchanged and read-only to them; HEFT_OPT_ML=0 or unset
// gives none; a bad value is refused naming the variable; the user-namespace path (what a
// user other than root gets) works too; a worker that cannot have it does not start, and the
// error names the step.
#include "heft/job/launch/opt_ml.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "heft/error.h"
#include "heft/job/launch/local_launcher.h"
#include "heft/job/launch/process.h"
#include "support/files.h"

namespace heft::job {
namespace {

namespace fs = std::filesystem;
using heft::test::read_file;
using heft::test::TempDir;

// The variables a training job's worker has, over the job folder `root`.
Environment job_env(const std::string& root, const std::string& on = "1") {
  return {{"PATH", "/bin:/usr/bin"},
          {"HEFT_OPT_ML", on},
          {"HEFT_JOB_DIR", root},
          {"SM_MODEL_DIR", root + "/model"},
          {"SM_CHECKPOINT_DIR", root + "/checkpoints"},
          {"SM_OUTPUT_DIR", root + "/output"},
          {"SM_INPUT_DIR", root + "/input/algo-1"}};
}

std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

int run_sh(const Environment& env, const std::string& script) {
  auto p = Process::spawn(SpawnOptions{{"/bin/sh", "-c", script}, env, false, {}, -1, -1, true});
  while (!p->try_reap()) ::usleep(10000);
  return shell_exit_code(p->wait_status());
}

TEST(OptMl, AWorkersFilesLandInTheJobsFoldersAndTheMachinesOptIsUntouched) {
  if (!fs::is_directory("/opt")) GTEST_SKIP() << "this machine has no /opt to lay /opt/ml in";
  const std::set<std::string> before = listing("/opt");
  TempDir dir;
  LocalLauncherOptions o;
  o.command = {"/bin/sh", "-c",
               "echo model-$RANK > /opt/ml/model/model-$RANK.pt && "
               "echo x > /opt/ml/checkpoints/x-$RANK && echo d > /opt/ml/output/data/d-$RANK && "
               "test -d /opt/ml/local_checkpoints && test -d /opt/ml/output/tensorboard && "
               "! touch /opt/stray 2>/dev/null"};
  o.processes_per_host = 2;
  o.prefix_output = false;
  o.extra_env = job_env(dir.path());
  fs::create_directories(dir.path() + "/output/data");
  ASSERT_EQ(LocalLauncher(o).run(), 0);
  for (int rank : {0, 1}) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(read_file(dir.path() + "/model/model-" + r + ".pt"), "model-" + r + "\n");
    EXPECT_TRUE(fs::exists(dir.path() + "/checkpoints/x-" + r));
    EXPECT_TRUE(fs::exists(dir.path() + "/output/data/d-" + r));
  }
  EXPECT_EQ(listing("/opt"), before) << "the machine's /opt changed";
}

TEST(OptMl, TwoJobsAtOnceSeeOnlyTheirOwn) {
  TempDir a, b;
  // Each writes its name, waits for the other to have written, then lists its /opt/ml/model.
  const std::string script =
      "echo $JOB > /opt/ml/model/$JOB; touch $SYNC/$JOB; "
      "for i in $(seq 200); do [ -e $SYNC/a ] && [ -e $SYNC/b ] && break; sleep 0.02; done; "
      "ls /opt/ml/model > $HEFT_JOB_DIR/seen";
  TempDir sync;
  Environment ea = job_env(a.path()), eb = job_env(b.path());
  ea["JOB"] = "a";
  eb["JOB"] = "b";
  ea["SYNC"] = eb["SYNC"] = sync.path();
  auto pa = Process::spawn(SpawnOptions{{"/bin/sh", "-c", script}, ea, false, {}, -1, -1, true});
  auto pb = Process::spawn(SpawnOptions{{"/bin/sh", "-c", script}, eb, false, {}, -1, -1, true});
  while (!pa->try_reap() || !pb->try_reap()) ::usleep(10000);
  EXPECT_EQ(pa->wait_status(), 0);
  EXPECT_EQ(pb->wait_status(), 0);
  EXPECT_EQ(read_file(a.path() + "/seen"), "a\n");
  EXPECT_EQ(read_file(b.path() + "/seen"), "b\n");
}

TEST(OptMl, OffWhenUnsetOrZeroAndABadValueIsRefusedByName) {
  TempDir dir;
  EXPECT_EQ(run_sh(job_env(dir.path(), "0"), "test ! -e /opt/ml/model"), 0);
  Environment unset = job_env(dir.path());
  unset.erase("HEFT_OPT_ML");
  EXPECT_EQ(run_sh(unset, "test ! -e /opt/ml/model"), 0);
  try {
    run_sh(job_env(dir.path(), "yes"), "true");
    FAIL() << "HEFT_OPT_ML=yes was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("HEFT_OPT_ML=yes"), std::string::npos) << e.what();
  }
  Environment no_model = job_env(dir.path());
  no_model.erase("SM_MODEL_DIR");
  EXPECT_THROW(opt_ml_plan(no_model), InvalidArgument);
}

TEST(OptMl, TheUserNamespacePathWorksAsForAUserOtherThanRoot) {
  TempDir dir;
  OptMlPlan plan = opt_ml_plan(job_env(dir.path()));
  plan.user_namespace = true;  // what opt_ml_plan chooses when heft does not run as root
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const char* step = nullptr;
    if (enter_opt_ml(plan, &step) != 0) ::_exit(2);
    ::_exit(::access("/opt/ml/model", W_OK) == 0 && ::access("/opt/ml/input", R_OK) == 0 ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(OptMl, AWorkerThatCannotHaveItDoesNotStartAndTheErrorNamesWhy) {
  TempDir dir;
  // A job folder that cannot be made: refused before anything starts, naming it.
  Environment env = job_env(dir.path());
  env["SM_INPUT_DIR"] = "/proc/version/input";
  try {
    run_sh(env, "true");
    FAIL() << "started without /opt/ml";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/version/input"), std::string::npos) << e.what();
  }
  // A step the child cannot take (no /opt to lay it in): the step is named.
  OptMlPlan plan = opt_ml_plan(job_env(dir.path()));
  plan.opt = dir.path() + "/no-such-opt";
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const char* step = "";
    const int err = enter_opt_ml(plan, &step);
    ssize_t n = ::write(pipe_fds[1], step, std::strlen(step));
    (void)n;
    ::_exit(err == ENOENT ? 0 : 3);
  }
  ::close(pipe_fds[1]);
  char buf[128] = {0};
  const ssize_t n = ::read(pipe_fds[0], buf, sizeof(buf) - 1);
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), "opening /opt");
}

}  // namespace
}  // namespace heft::job
