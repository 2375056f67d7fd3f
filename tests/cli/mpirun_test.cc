// ctest-labels: multiproc
// ctest-resource-lock: netns
// `heft run --launcher mpirun` with Debian's OpenMPI: on this machine (a localhost hostfile),
// and across two network-namespace hosts (tests/support/netns_hosts.sh, 1 Gbit/s links)
// reached through mpirun's rsh agent (tests/support/netns_rsh.sh), with real collectives
// between them; bad input (too many processes for a host's slots, an unreachable host,
// options that make mpirun fail) is a clear error and leaves no process behind. The namespace
// cases skip, saying why, where namespaces cannot be made (not root, no iproute2).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <string>

#include "support/command.h"
#include "support/files.h"
#include "support/heft_process.h"
#include "support/link_attacker.h"

#include <nlohmann/json.hpp>

namespace {

using std::chrono::seconds;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kWorker = HEFT_BINARY_DIR "/test-workers/step_worker";
const std::string kHosts = HEFT_SOURCE_DIR "/tests/support/netns_hosts.sh";
const std::string kRsh = HEFT_SOURCE_DIR "/tests/support/netns_rsh.sh";

heft::test::Outcome heft_run(const heft::test::TempDir& dir, const std::vector<std::string>& args,
                             const std::vector<std::pair<std::string, std::string>>& env = {},
                             seconds timeout = seconds(90)) {
  static int n = 0;
  std::vector<std::string> all = {"run", "--launcher", "mpirun"};
  all.insert(all.end(), args.begin(), args.end());
  heft::test::HeftProcess p(kHeft, all, dir.path() + "/out-" + std::to_string(n++), env);
  return p.wait(timeout);
}

std::string write(const heft::test::TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.path() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// No step_worker with this --steps count runs (each case uses its own count; the bracket
// keeps pgrep's pattern from matching the shell that runs it).
bool no_worker_left(int steps) {
  return heft::test::run_command("pgrep -f 'step_worke[r] .*--steps " + std::to_string(steps) + "$'")
      .text.empty();
}

TEST(Mpirun, LocalhostRanksGetTheContract) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "localhost slots=4\n"), "-n", "3", "--",
                                "/bin/sh", "-c",
                                "echo rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
                                "host=$SM_CURRENT_HOST store=$HEFT_STORE token=${#HEFT_TOKEN}"});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  for (int r = 0; r < 3; ++r)
    EXPECT_NE(o.out.find("rank=" + std::to_string(r) + "/3 local=" + std::to_string(r) +
                         "/3 host=localhost store=127.0.0.1:"),
              std::string::npos) << o.out;
  EXPECT_EQ(o.out.find("token=0"), std::string::npos) << o.out;  // every rank has the token
}

// A rank whose output ends without a newline: its last line still reaches the user (the
// engine's output is read to its end, and the line pending there is delivered).
TEST(Mpirun, ALastLineWithoutNewlineIsKept) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "localhost slots=2\n"), "-n", "2", "--",
                                "/bin/sh", "-c", "echo first=$RANK; printf last=$RANK"});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(o.out.find("first=" + std::to_string(r)), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("last=" + std::to_string(r)), std::string::npos) << o.out;
  }
}

TEST(Mpirun, BadInputIsAClearErrorNamingIt) {
  heft::test::TempDir dir;
  const auto slots = heft_run(dir, {"--hostfile", write(dir, "hosts", "localhost slots=2\n"), "-n", "3",
                                    "--", kWorker, "--steps", "7701"});
  EXPECT_EQ(slots.exit_code, 2) << heft::test::describe(slots);
  EXPECT_NE(slots.err.find("processes_per_host 3 is more than the 2 slots of host localhost"),
            std::string::npos) << slots.err;
  const auto unknown = heft_run(dir, {"--hostfile", write(dir, "h2", "no-such-host.invalid\n"), "--",
                                      kWorker, "--steps", "7701"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.err.find("no-such-host.invalid"), std::string::npos) << unknown.err;
  const auto options = heft_run(dir, {"--hostfile", write(dir, "h3", "localhost slots=2\n"), "-n", "2",
                                      "--mpi-options", "--no-such-mpirun-option", "--", kWorker,
                                      "--steps", "7701"});
  EXPECT_NE(options.exit_code, 0) << heft::test::describe(options);
  EXPECT_NE((options.out + options.err).find("no-such-mpirun-option"), std::string::npos)
      << heft::test::describe(options);
  EXPECT_TRUE(no_worker_left(7701));
}

class NetnsHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto check = heft::test::run_command(kHosts + " check 2>&1");
    if (check.code != 0) GTEST_SKIP() << "no namespace hosts here: " << check.text;
    prefix_ = "hft" + std::to_string(::getpid() % 100000);
    const auto up = heft::test::run_command(kHosts + " up 2 --net 78 --prefix " + prefix_ + " 2>&1");
    ASSERT_EQ(up.code, 0) << up.text;
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    // OpenMPI's daemon on a host whose link was cut cannot be reached to be stopped (on a real
    // cluster the host is gone with it); here it would outlive the test.
    heft::test::run_command("pkill -9 -f 'oob_tcp_if_include 10.78.0.0/2[4]'");
    heft::test::run_command(kHosts + " down --prefix " + prefix_);
  }
  std::string mpi_options() const {
    return "--mca plm_rsh_agent " + kRsh + " --mca oob_tcp_if_include 10.78.0.0/24";
  }
  std::string prefix_;
};

TEST_F(NetnsHosts, CollectivesRunAcrossTwoHostsThroughMpirunsRshAgent) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "10.78.0.11\n10.78.0.12\n"), "-n", "2",
                                "--mpi-options", mpi_options(), "--", "/bin/sh", "-c",
                                "echo rank=$RANK uts=$(hostname) host=$SM_CURRENT_HOST store=$HEFT_STORE; "
                                "exec " + kWorker + " --phase-ms 0 --steps 7720"},
                          {{"NETNS_PREFIX", prefix_}});
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE(o.out.find("rank=0 uts=h1 host=10.78.0.11 store=10.78.0.1:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank=3 uts=h2 host=10.78.0.12 store=10.78.0.1:"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("step=7720 loss="), std::string::npos) << o.out;
  EXPECT_TRUE(no_worker_left(7720));
}

TEST_F(NetnsHosts, UnreachableHostIsNamedAndNothingIsLeft) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "10.78.0.11\n10.78.0.19\n"), "-n", "1",
                                "--mpi-options", mpi_options(), "--", kWorker, "--steps", "7705"},
                          {{"NETNS_PREFIX", prefix_}}, seconds(60));
  EXPECT_NE(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE((o.out + o.err).find("h9"), std::string::npos) << heft::test::describe(o);
  EXPECT_TRUE(no_worker_left(7705));
}

}  // namespace

namespace {

// A supervised job (`heft train`) with cluster.launcher mpirun over the namespace hosts.
class MpirunJob : public NetnsHosts {
 protected:
  heft::test::Outcome heft(const heft::test::TempDir& dir, const std::vector<std::string>& args,
                           seconds timeout = seconds(120)) {
    static int n = 0;
    heft::test::HeftProcess p(kHeft, args, dir.path() + "/job-" + std::to_string(n++),
                              {{"HEFT_HOME", dir.path() + "/home"}, {"NETNS_PREFIX", prefix_}});
    return p.wait(timeout);
  }
  std::string spec(const heft::test::TempDir& dir, const std::string& name, const std::string& worker_args,
                   const std::string& extra = "") {
    return write(dir, name + ".yaml",
                 "name: " + name + "\nentry_point: [" + kWorker + worker_args + "]\n"
                 "cluster: {launcher: mpirun, hosts: [10.78.0.11, 10.78.0.12], processes_per_host: 2,\n"
                 "          custom_mpi_options: \"" + mpi_options() + "\"}\n"
                 "metric_definitions: [{name: 'train:loss', regex: 'loss=([0-9.]+)'}]\n" + extra);
  }
};

TEST_F(MpirunJob, SupervisedJobRunsAcrossHostsWithLogsMetricsAndStepTimings) {
  heft::test::TempDir dir;
  const auto run = heft(dir, {"train", spec(dir, "across", ", --phase-ms, 0, --steps, 773")});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  EXPECT_NE(run.out.find("[rank 0] step=773 loss="), std::string::npos) << run.out.substr(0, 2000);
  const auto d = heft(dir, {"describe", "across", "--json"});
  const nlohmann::json j = d.json();
  EXPECT_EQ(j["status"], "Completed");
  EXPECT_EQ(j["instance_count"], 2);
  EXPECT_EQ(j["world_size"], 4);
  const auto steps = heft(dir, {"metrics", "across", "--name", "step:total_ms", "--format", "json"});
  EXPECT_EQ(steps.json().size(), 4u * 773u);  // every rank's step timings, from both hosts
  const auto loss = heft(dir, {"metrics", "across", "--name", "train:loss", "--format", "json"});
  EXPECT_EQ(loss.json().size(), 773u);
  EXPECT_TRUE(no_worker_left(773));
}

// Every rank on every host has its system series (its shim samples it and the profiler reads
// the samples from the store), and `heft describe` lists both hosts with their ranks.
TEST_F(MpirunJob, EveryRankOnEveryHostHasSystemSeries) {
  heft::test::TempDir dir;
  const auto run = heft(dir, {"train", spec(dir, "sampled", ", --phase-ms, 5, --steps, 150",
                                            "profiler: {interval_s: 0.3}\n")});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const auto cpu = heft(dir, {"metrics", "sampled", "--name", "system:cpu_percent", "--format", "json"});
  std::set<int> ranks;
  for (const auto& p : cpu.json()) ranks.insert(p["rank"].get<int>());
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << cpu.out.substr(0, 2000);
  const nlohmann::json j = heft(dir, {"describe", "sampled", "--json"}).json();
  ASSERT_EQ(j["hosts"].size(), 2u) << j["hosts"].dump();
  std::set<int> listed;
  for (const auto& h : j["hosts"])
    for (const auto& r : h["ranks"]) listed.insert(r.get<int>());
  EXPECT_EQ(listed, (std::set<int>{0, 1, 2, 3})) << j["hosts"].dump();
  // Each host's memory comes from its own shims' samples (BatchSize judges a rank by it).
  for (const auto& h : j["hosts"]) {
    const std::string name = "system:" + h["host"].get<std::string>() + "/memory_available_mb";
    const auto mem = heft(dir, {"metrics", "sampled", "--name", name, "--format", "json"});
    EXPECT_FALSE(mem.json().empty()) << name << ": " << mem.out.substr(0, 500);
  }
  EXPECT_TRUE(no_worker_left(150));
}

// Rank 3, on the second host, is CPU-bound in its data loading (step_worker --busy-rank: it
// spins where the others sleep): its own shim's samples show its CPU busy against its host's
// cores, so CPUBottleneck names it and its host (the supervisor starts no worker, so no
// sample comes from its /proc), and LoadBalancing names it as the slowest. Every rank has
// its system series and `heft describe` lists both hosts. cpu_threshold is 50, not 90: the
// machine's 2 cores are shared with the other ranks and other tests.
TEST_F(MpirunJob, ACpuBoundRankOnTheSecondHostIsNamedByTheRules) {
  heft::test::TempDir dir;
  const auto run = heft(dir, {"train", spec(dir, "busy", ", --phase-ms, 2, --busy-rank, 3, --busy-ms, 40, "
                                                 "--steps, 160",
                                            "profiler: {interval_s: 0.3}\n"
                                            "rules: [{rule: CPUBottleneck, parameters: {cpu_threshold: 50}},\n"
                                            "        {rule: LoadBalancing}]\n")});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const nlohmann::json j = heft(dir, {"describe", "busy", "--json"}).json();
  std::map<std::string, nlohmann::json> found;  // by rule; one finding each: no other rank
  for (const auto& f : j["findings"])
    EXPECT_TRUE(found.emplace(f["rule"].get<std::string>(), f).second) << j["findings"].dump(1);
  ASSERT_EQ(found.count("CPUBottleneck"), 1u) << j["findings"].dump(1);
  EXPECT_EQ(found["CPUBottleneck"]["rank"], 3) << j["findings"].dump(1);
  EXPECT_EQ(found["CPUBottleneck"]["evidence"]["host"], "10.78.0.12") << j["findings"].dump(1);
  EXPECT_EQ(found["CPUBottleneck"]["message"].get<std::string>().rfind("rank 3 on 10.78.0.12: ", 0), 0u)
      << j["findings"].dump(1);
  ASSERT_EQ(found.count("LoadBalancing"), 1u) << j["findings"].dump(1);
  EXPECT_EQ(found["LoadBalancing"]["rank"], 3) << j["findings"].dump(1);
  EXPECT_NE(run.err.find("rule CPUBottleneck: rank 3 on 10.78.0.12: "), std::string::npos) << run.err;
  const auto cpu = heft(dir, {"metrics", "busy", "--name", "system:cpu_percent", "--format", "json"});
  std::set<int> ranks;
  for (const auto& p : cpu.json()) ranks.insert(p["rank"].get<int>());
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3})) << cpu.out.substr(0, 2000);
  ASSERT_EQ(j["hosts"].size(), 2u) << j["hosts"].dump();
  std::set<std::string> hosts;
  for (const auto& h : j["hosts"]) hosts.insert(h["host"].get<std::string>());
  EXPECT_EQ(hosts, (std::set<std::string>{"10.78.0.11", "10.78.0.12"})) << j["hosts"].dump();
  std::cerr << "findings: " << j["findings"].dump(1) << "\n";
  EXPECT_TRUE(no_worker_left(160));
}

// Every rank of a training job gets the training toolkit's contract on its own host, as
// local ranks do: SM_TRAINING_ENV naming its host and the hyperparameters, and the host's
// input config files (resourceconfig.json, hyperparameters.json) in SM_INPUT_CONFIG_DIR.
TEST_F(MpirunJob, EveryRankGetsTheTrainingToolkitsEnvironment) {
  heft::test::TempDir dir;
  const std::string script = write(dir, "toolkit.py",
      "import json, os\n"
      "env = json.loads(os.environ['SM_TRAINING_ENV'])\n"
      "config = os.environ['SM_INPUT_CONFIG_DIR']\n"
      "resources = json.load(open(config + '/resourceconfig.json'))\n"
      "hps = json.load(open(config + '/hyperparameters.json'))\n"
      "print('toolkit rank=%s env_host=%s config_host=%s hosts=%s lr=%s file_lr=%s iface=%s' % (\n"
      "    os.environ['RANK'], env['current_host'], resources['current_host'], ','.join(env['hosts']),\n"
      "    env['hyperparameters']['lr'], hps['lr'], env['network_interface_name']))\n");
  const std::string path = write(dir, "toolkit.yaml",
      "name: toolkit\nentry_point: [" HEFT_PYTHON ", " + script + "]\nhyperparameters: {lr: 0.5}\n"
      "cluster: {launcher: mpirun, hosts: [10.78.0.11, 10.78.0.12], processes_per_host: 2,\n"
      "          custom_mpi_options: \"" + mpi_options() + "\"}\nrules: []\n");
  const auto run = heft(dir, {"train", path});
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  for (int r = 0; r < 4; ++r) {
    const std::string host = r < 2 ? "10.78.0.11" : "10.78.0.12";
    EXPECT_NE(run.out.find("toolkit rank=" + std::to_string(r) + " env_host=" + host + " config_host=" +
                           host + " hosts=10.78.0.11,10.78.0.12 lr=0.5 file_lr=0.5 iface=eth0"),
              std::string::npos) << run.out;
  }
}

// A rank that exits with an error is named with its code (from mpirun's report), not taken
// for a lost host, and its log's last lines are in the reason.
TEST_F(MpirunJob, AFailingRankIsNamedWithItsExitCode) {
  heft::test::TempDir dir;
  const std::string path = write(dir, "failing.yaml",
      "name: failing\nentry_point: [/bin/sh, -c, 'if [ $RANK = 3 ]; then echo giving up; exit 7; fi; exec " +
      kWorker + " --steps 774500']\n"
      "cluster: {launcher: mpirun, hosts: [10.78.0.11, 10.78.0.12], processes_per_host: 2,\n"
      "          custom_mpi_options: \"" + mpi_options() + "\"}\nstopping: {timeout_s: 10}\n");
  const auto run = heft(dir, {"train", path});
  EXPECT_EQ(run.exit_code, 1) << heft::test::describe(run);
  const std::string reason = heft(dir, {"describe", "failing", "--json"}).json()["failure_reason"];
  EXPECT_NE(reason.find("rank 3 exited with code 7"), std::string::npos) << reason;
  EXPECT_NE(reason.find("giving up"), std::string::npos) << reason;
  EXPECT_TRUE(no_worker_left(774500));
}

TEST_F(MpirunJob, MaxRuntimeStopsTheGroupOnEveryHost) {
  heft::test::TempDir dir;
  const auto run = heft(dir, {"train", spec(dir, "limited", ", --steps, 774000",
                                            "stopping: {max_runtime_s: 3, grace_s: 2}\n")});
  EXPECT_EQ(run.exit_code, 3) << heft::test::describe(run);
  EXPECT_EQ(heft(dir, {"describe", "limited", "--json"}).json()["secondary_status"], "MaxRuntimeExceeded");
  EXPECT_TRUE(no_worker_left(774000));
}

TEST_F(MpirunJob, BadClusterFieldsAreClearErrors) {
  heft::test::TempDir dir;
  const std::string both = write(dir, "both.yaml",
                                 "name: both\nentry_point: [true]\n"
                                 "cluster: {launcher: mpirun, hosts: [a], hostfile: /nope}\n");
  const auto o = heft(dir, {"train", both});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("exactly one of cluster.hosts"), std::string::npos) << o.err;
  const std::string slots = write(dir, "slots.yaml",
                                  "name: slots\nentry_point: [true]\n"
                                  "cluster: {launcher: mpirun, hostfile: " + write(dir, "hf", "n1 slots=1\n") +
                                  ", processes_per_host: 2}\n");
  const auto s = heft(dir, {"train", slots});
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_NE(s.err.find("cluster.processes_per_host: expected at most the 1 slots of host n1"), std::string::npos)
      << s.err;
  const std::string local = write(dir, "local.yaml", "name: local\nentry_point: [true]\ncluster: {hosts: [a]}\n");
  const auto l = heft(dir, {"train", local});
  EXPECT_EQ(l.exit_code, 2);
  EXPECT_NE(l.err.find("cluster.hosts"), std::string::npos) << l.err;
}

}  // namespace

namespace {

// Kills every process of host `host` that runs a step_worker with `steps` steps (the
// namespace hosts share this machine's process table; a rank's environment names its host).
int kill_host_ranks(const std::string& host, int steps) {
  // Every rank of the host is found first and all are killed at once: killed one by one, the
  // host's other rank could see its neighbour die and exit before its turn came.
  const auto r = heft::test::run_command(
      "pids=; for p in $(pgrep -f 'step_worke[r] .*--steps " + std::to_string(steps) + "$'); do "
      "tr '\\0' '\\n' < /proc/$p/environ | grep -qx 'SM_CURRENT_HOST=" + host + "' && "
      "pids=\"$pids $p\"; done; [ -n \"$pids\" ] && kill -9 $pids && for p in $pids; do "
      "echo killed $p; done; true");
  return static_cast<int>(std::count(r.text.begin(), r.text.end(), '\n'));
}

TEST_F(MpirunJob, LostHostEndsTheJobNamingItAndRetryStartsAgain) {
  heft::test::TempDir dir;
  const std::string path = spec(dir, "lost", ", --phase-ms, 5, --steps, 775",
                                "retry: {max_attempts: 2}\n");
  heft::test::HeftProcess job(kHeft, {"train", path}, dir.path() + "/lost-job",
                              {{"HEFT_HOME", dir.path() + "/home"}, {"NETNS_PREFIX", prefix_}});
  // Wait for the first start's steps, then kill host 2's ranks once.
  int killed = 0;
  for (int i = 0; i < 200 && killed == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (heft::test::read_file(dir.path() + "/home/jobs/lost/logs/rank-0.log").find("step=20 ") !=
        std::string::npos)
      killed = kill_host_ranks("10.78.0.12", 775);
  }
  ASSERT_EQ(killed, 2) << "host 2's ranks were not found";
  const auto o = job.wait(seconds(120));
  EXPECT_EQ(o.exit_code, 0) << heft::test::describe(o);  // the retry ran to the end
  const nlohmann::json j = heft(dir, {"describe", "lost", "--json"}).json();
  EXPECT_EQ(j["attempts"], 2);
  bool named = false;
  for (const auto& t : j["transitions"])
    named = named || t["message"].get<std::string>().find("host 10.78.0.12 was lost") != std::string::npos;
  EXPECT_TRUE(named) << j["transitions"].dump(1);
  EXPECT_TRUE(no_worker_left(775));
}

}  // namespace

namespace {

TEST_F(NetnsHosts, TorchrunStyleScriptRunsUnchangedAcrossHosts) {
  heft::test::TempDir dir;
  const auto o = heft_run(dir, {"--hostfile", write(dir, "hosts", "10.78.0.11\n10.78.0.12\n"), "-n", "2",
                                "--mpi-options", mpi_options(), "--", HEFT_PYTHON,
                                HEFT_SOURCE_DIR "/tests/cli/torchrun_script.py"},
                          {{"NETNS_PREFIX", prefix_}}, seconds(120));
  ASSERT_EQ(o.exit_code, 0) << heft::test::describe(o);
  EXPECT_NE(o.out.find("rank 0/4 on 10.78.0.11: all_reduce=6 all_gather=[0, 10, 20, 30] ok"),
            std::string::npos) << o.out;
  EXPECT_NE(o.out.find("rank 3/4 on 10.78.0.12: all_reduce=6"), std::string::npos) << o.out;
}

}  // namespace

namespace {

// Someone on the network without the job's token (tests/support/link_attacker.h, dialling from
// the launching host) claims to be rank 3 to each rank's link listener the moment it opens, and
// tries the job's store: every handshake is refused, the refusals are in the ranks' logs, and
// the job completes with every allreduce checked (rank 3 joins 2 s late, so the listeners of
// ranks 0-2 on both hosts are open that long).
TEST_F(MpirunJob, StrangersOnTheNetworkAreRefusedAndTheJobComputes) {
  heft::test::TempDir dir;
  heft::test::LinkAttacker attacker("--steps 7792", 3);
  const auto run = heft(dir, {"train", spec(dir, "strangers",
                                            ", --phase-ms, 0, --steps, 7792, --join-delay-rank, 3")});
  const auto tally = attacker.stop();
  std::cout << "attacker: " << tally.summary() << std::endl;
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  EXPECT_EQ(heft(dir, {"describe", "strangers", "--json"}).json()["status"], "Completed");
  heft::test::expect_all_refused(tally, 3, dir.path() + "/home", "strangers", "10.78.0.1");
  EXPECT_TRUE(no_worker_left(7792));
}

TEST_F(MpirunJob, LinkDownEndsTheJobWithinTheTimeoutNamingTheHost) {
  heft::test::TempDir dir;
  const std::string path = spec(dir, "cut", ", --phase-ms, 5, --steps, 779000",
                                "rules: []\nstopping: {timeout_s: 4, grace_s: 2}\n");
  heft::test::HeftProcess job(kHeft, {"train", path}, dir.path() + "/cut-job",
                              {{"HEFT_HOME", dir.path() + "/home"}, {"NETNS_PREFIX", prefix_}});
  bool cut = false;
  for (int i = 0; i < 200 && !cut; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (heft::test::read_file(dir.path() + "/home/jobs/cut/logs/rank-0.log").find("step=20 ") !=
        std::string::npos)
      cut = heft::test::run_command("ip -n " + prefix_ + "-h2 link set eth0 down").code == 0;
  }
  ASSERT_TRUE(cut);
  const auto start = std::chrono::steady_clock::now();
  const auto o = job.wait(seconds(60));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(o.exit_code, 1) << heft::test::describe(o);
  // timeout 4 s, then mpirun's abort hangs on the unreachable host: stopped 2 + 5 s later.
  EXPECT_LT(took, 25) << heft::test::describe(o);
  const nlohmann::json j = heft(dir, {"describe", "cut", "--json"}).json();
  EXPECT_NE(j["failure_reason"].get<std::string>().find("host 10.78.0.12 was lost"), std::string::npos)
      << j["failure_reason"];
  EXPECT_TRUE(no_worker_left(779000));
}

}  // namespace
