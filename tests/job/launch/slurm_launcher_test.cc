// ctest-labels: unit
// The Slurm launcher's pure parts: host lists, srun's arguments, SLURM_* -> the contract.
#include "heft/job/launch/slurm_launcher.h"

#include <gtest/gtest.h>

#include "heft/error.h"

namespace heft::job {
namespace {

TEST(SlurmLauncher, ExpandsHostLists) {
  EXPECT_EQ(expand_hostlist("n[1-3,7],gpu01,x[08-10]"),
            (std::vector<std::string>{"n1", "n2", "n3", "n7", "gpu01", "x08", "x09", "x10"}));
  EXPECT_EQ(expand_hostlist("node5"), (std::vector<std::string>{"node5"}));
  EXPECT_EQ(expand_hostlist("a[1-2]b"), (std::vector<std::string>{"a1b", "a2b"}));
  EXPECT_THROW(expand_hostlist("n[1-"), InvalidArgument);
  EXPECT_THROW(expand_hostlist("n[3-1]"), InvalidArgument);
  EXPECT_THROW(expand_hostlist(""), InvalidArgument);
}

TEST(SlurmLauncher, SrunArgv) {
  SlurmOptions o;
  o.nodes = 2;
  o.processes_per_host = 3;
  o.command = {"python3", "train.py"};
  o.custom_srun_options = "--partition 'big one'";
  o.heft_binary = "/opt/heft";
  const auto argv = srun_argv(o);
  EXPECT_EQ(argv, (std::vector<std::string>{"srun", "--nodes=2", "--ntasks-per-node=3", "--ntasks=6",
                                            "--kill-on-bad-exit=1", "--export=ALL",
                                            "--partition", "big one", "/opt/heft", "slurm-worker", "--",
                                            "python3", "train.py"}));
}

TEST(SlurmLauncher, MapsSlurmVariablesToTheContract) {
  const Environment parent = {{"SLURM_PROCID", "4"},          {"SLURM_NTASKS", "6"},
                              {"SLURM_LOCALID", "1"},         {"SLURM_NODEID", "1"},
                              {"SLURM_NTASKS_PER_NODE", "3"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  const Environment env = slurm_worker_environment(parent);
  EXPECT_EQ(env.at("RANK"), "4");
  EXPECT_EQ(env.at("WORLD_SIZE"), "6");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "3");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("SM_HOSTS"), R"(["n1","n2"])");
  EXPECT_EQ(env.at("SM_CURRENT_HOST"), "n2");
  EXPECT_EQ(env.at("HEFT_HOST"), "n2");
  EXPECT_EQ(env.at("MASTER_ADDR"), "n1");
  Environment missing = parent;
  missing.erase("SLURM_PROCID");
  try {
    slurm_worker_environment(missing);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_PROCID is not set"), std::string::npos);
  }
}

}  // namespace
}  // namespace heft::job
