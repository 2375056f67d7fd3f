// ctest-labels: unit
// The mpirun launcher's pure parts: hostfiles, word splitting of custom options, mpirun's
// argument vector (the token never on it), and the OMPI_COMM_WORLD_* -> contract mapping.
#include "heft/job/launch/mpirun_launcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "heft/error.h"
#include "support/files.h"

namespace heft::job {
namespace {

std::string hostfile(const test::TempDir& dir, const std::string& text) {
  const std::string path = dir.path() + "/hosts";
  std::ofstream(path) << text;
  return path;
}

TEST(MpirunLauncher, ReadsHostfiles) {
  test::TempDir dir;
  auto hosts = read_hostfile(hostfile(dir, "# cluster\nnode1 slots=4\n\nnode2  # spare\n10.0.0.3 slots=2 max_slots=8\n"));
  ASSERT_TRUE(hosts.ok()) << hosts.error();
  ASSERT_EQ(hosts.value().size(), 3u);
  EXPECT_EQ(hosts.value()[0].name, "node1");
  EXPECT_EQ(hosts.value()[0].slots, 4);
  EXPECT_EQ(hosts.value()[1].slots, 0);
  EXPECT_EQ(hosts.value()[2].name, "10.0.0.3");
  auto bad = read_hostfile(hostfile(dir, "node1\nnode2 slots=zero\n"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("hosts:2: slots must be a positive integer, found 'zero'"), std::string::npos)
      << bad.error();
  auto odd = read_hostfile(hostfile(dir, "node1 cpus=3\n"));
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().find("hosts:1: expected 'NAME [slots=N]', found 'cpus=3'"), std::string::npos);
  EXPECT_FALSE(read_hostfile(hostfile(dir, "# nobody\n")).ok());
  EXPECT_FALSE(read_hostfile(dir.path() + "/missing").ok());
}

TEST(MpirunLauncher, SplitsOptionsLikeAShell) {
  EXPECT_EQ(split_words("--mca plm_rsh_agent 'ssh -p 2222'  -x A"),
            (std::vector<std::string>{"--mca", "plm_rsh_agent", "ssh -p 2222", "-x", "A"}));
  EXPECT_TRUE(split_words("  ").empty());
  EXPECT_THROW(split_words("--mca 'oops"), InvalidArgument);
}

TEST(MpirunLauncher, ArgvForwardsNamesNotValues) {
  MpirunOptions o;
  o.hosts = {{"h1", 2}, {"h2", 2}};
  o.processes_per_host = 2;
  o.command = {"python3", "train.py"};
  o.custom_mpi_options = "--mca btl tcp,self";
  o.heft_binary = "/opt/heft/bin/heft";
  const auto argv = mpirun_argv(o, "/tmp/hf", {{"HEFT_TOKEN", "s3cret"}, {"HEFT_STORE", "a:1"}});
  const std::string joined = [&] {
    std::string s;
    for (const auto& a : argv) s += a + " ";
    return s;
  }();
  EXPECT_EQ(joined.find("s3cret"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--hostfile /tmp/hf -np 4 --map-by ppr:2:node --bind-to none"), std::string::npos) << joined;
  EXPECT_NE(joined.find("-x HEFT_STORE -x HEFT_TOKEN --mca btl tcp,self /opt/heft/bin/heft mpi-worker -- python3 train.py"),
            std::string::npos) << joined;
}

TEST(MpirunLauncher, MapsOpenMpiVariablesToTheContract) {
  const Environment parent = {{"OMPI_COMM_WORLD_RANK", "3"},       {"OMPI_COMM_WORLD_SIZE", "4"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                              {"HEFT_MPI_HOSTS", "node1,node2"},   {"PATH", "/usr/bin"}};
  const Environment env = mpi_worker_environment(parent);
  EXPECT_EQ(env.at("RANK"), "3");
  EXPECT_EQ(env.at("WORLD_SIZE"), "4");
  EXPECT_EQ(env.at("LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(env.at("GROUP_RANK"), "1");
  EXPECT_EQ(env.at("SM_CURRENT_HOST"), "node2");
  EXPECT_EQ(env.at("HEFT_HOST"), "node2");
  EXPECT_EQ(env.at("SM_HOSTS"), R"(["node1","node2"])");
  EXPECT_EQ(env.at("TORCHELASTIC_RESTART_COUNT"), "0");
  EXPECT_EQ(env.at("PATH"), "/usr/bin");
  Environment missing = parent;
  missing.erase("OMPI_COMM_WORLD_RANK");
  try {
    mpi_worker_environment(missing);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK is not set"), std::string::npos);
  }
  Environment uneven = parent;
  uneven["OMPI_COMM_WORLD_LOCAL_SIZE"] = "3";
  EXPECT_THROW(mpi_worker_environment(uneven), InvalidArgument);
}

}  // namespace
}  // namespace heft::job
