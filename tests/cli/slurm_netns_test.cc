// ctest-labels: multiproc
// ctest-resource-lock: netns
// Slurm with one slurmd per namespace host (tests/support/slurm_cluster.sh --netns: each
// node its own network stack at 10.76.0.1N behind a 1 Gbit/s link, the controller and heft's
// store on the bridge, 10.76.0.1): `heft run --launcher slurm` runs collectives between the
// nodes' own addresses, and `heft train` submits a batch job whose workers reach the store
// given by cluster.store_address. Skipped, saying why, where Slurm or namespaces cannot start.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/command.h"
#include "support/files.h"
#include "support/heft_process.h"
#include "support/link_attacker.h"

namespace {

using std::chrono::seconds;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kWorker = HEFT_BINARY_DIR "/test-workers/step_worker";
const std::string kCluster = HEFT_SOURCE_DIR "/tests/support/slurm_cluster.sh";
const std::string kHosts = HEFT_SOURCE_DIR "/tests/support/netns_hosts.sh";

class SlurmNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const std::string& check : {kCluster + " check", kHosts + " check"}) {
      const auto c = heft::test::run_command(check);
      if (c.code != 0) GTEST_SKIP() << c.text;
    }
    dir_ = "/tmp/heft-slurm-netns-" + std::to_string(::getpid());
    const auto up = heft::test::run_command(kCluster + " up " + dir_ + " 2 --netns 2>&1");
    if (up.code != 0) {
      heft::test::run_command(kCluster + " down " + dir_);
      dir_.clear();
      GTEST_SKIP() << "Slurm on namespace hosts did not start here: " << up.text;
    }
  }
  void TearDown() override {
    if (!dir_.empty()) heft::test::run_command(kCluster + " down " + dir_);
  }
  heft::test::Outcome heft(const std::vector<std::string>& args, seconds timeout = seconds(120)) {
    static int n = 0;
    heft::test::HeftProcess p(kHeft, args, tmp_.path() + "/out-" + std::to_string(n++),
                              {{"SLURM_CONF", dir_ + "/slurm.conf"}, {"HEFT_HOME", tmp_.path() + "/home"}});
    return p.wait(timeout);
  }
  std::string queue() {
    return heft::test::run_command("SLURM_CONF=" + dir_ + "/slurm.conf timeout 10 squeue -h").text;
  }
  heft::test::TempDir tmp_;
  std::string dir_;
};

TEST_F(SlurmNetns, TasksRunCollectivesBetweenTheNodesOwnAddresses) {
  const auto o = heft({"run", "--launcher", "slurm", "--hosts", "2", "-n", "2", "--store-address",
                       "10.76.0.1", "--", "/bin/sh", "-c",
                       "echo rank=$RANK host=$HEFT_HOST ip=$(hostname -I | tr -d ' ') "
                       "gloo=$GLOO_SOCKET_IFNAME; exec " + kWorker + " --phase-ms 0 --steps 7770"});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE(o.out.find("rank=0 host=n1 ip=10.76.0.11 gloo=eth0"), std::string::npos) << o.out.substr(0, 600);
  EXPECT_NE(o.out.find("rank=3 host=n2 ip=10.76.0.12 gloo=eth0"), std::string::npos) << o.out.substr(0, 600);
  EXPECT_NE(o.out.find("step=7770 loss="), std::string::npos);
}

TEST_F(SlurmNetns, BatchJobReachesTheStoreAcrossTheLinks) {
  const std::string path = tmp_.path() + "/netns-batch.yaml";
  std::ofstream(path) << "name: netns-batch\nentry_point: [" << kWorker
                      << ", --phase-ms, '0', --steps, '7771']\n"
                      << "cluster: {launcher: slurm, instance_count: 2, processes_per_host: 2, "
                         "store_address: 10.76.0.1}\n"
                      << "metric_definitions: [{name: 'train:loss', regex: 'loss=([0-9.]+)'}]\n";
  const auto run = heft({"train", path});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  EXPECT_NE(run.err.find("submitted Slurm batch job"), std::string::npos) << run.err;
  const nlohmann::json j = heft({"describe", "netns-batch", "--json"}).json();
  EXPECT_EQ(j["status"], "Completed");
  EXPECT_EQ(heft({"metrics", "netns-batch", "--name", "train:loss", "--format", "json"}).json().size(), 7771u);
  EXPECT_EQ(queue(), "");
}

// Someone on the network without the job's token (tests/support/link_attacker.h, dialling from
// the controller's side of the bridge) claims to be rank 3 to each rank's link listener the
// moment it opens, and tries the job's store: every handshake is refused, the refusals are in
// the ranks' logs, and the batch job completes with every allreduce checked (rank 3 joins 2 s
// late, so the listeners of ranks 0-2 on both nodes are open that long).
TEST_F(SlurmNetns, StrangersOnTheNetworkAreRefusedAndTheJobComputes) {
  const std::string path = tmp_.path() + "/strangers.yaml";
  std::ofstream(path) << "name: strangers\nentry_point: [" << kWorker
                      << ", --phase-ms, '0', --steps, '7793', --join-delay-rank, '3']\n"
                      << "cluster: {launcher: slurm, instance_count: 2, processes_per_host: 2, "
                         "store_address: 10.76.0.1}\n";
  heft::test::LinkAttacker attacker("--steps 7793", 3);
  const auto run = heft({"train", path});
  const auto tally = attacker.stop();
  std::cout << "attacker: " << tally.summary() << std::endl;
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  EXPECT_EQ(heft({"describe", "strangers", "--json"}).json()["status"], "Completed");
  heft::test::expect_all_refused(tally, 3, tmp_.path() + "/home", "strangers", "10.76.0.1");
  EXPECT_EQ(queue(), "");
}

}  // namespace
