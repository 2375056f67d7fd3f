// ctest-labels: multiproc
// Per-host sampling (docs/observability.md "Hosts"): a rank's sample survives its text form;
// a real `heft mpi-worker` shim publishes its rank's process group and its host in the job's
// store; the profiler, reading that store for ranks it has no pid of, records them as
// system:* series under their host, and a rank's utilisation uses its own host's cores and
// BatchSize its own host's memory (an older shim's sample, without memory, still parses);
// `heft describe` lists a local job's host with its cores and ranks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

#include "heft/comm/store/tcp_store.h"
#include "heft/job/paths.h"
#include "heft/job/record/job_db.h"
#include "heft/job/spec/rule_spec.h"
#include "heft/job/spec/spec.h"
#include "heft/profile/job_profiler.h"
#include "heft/profile/rules.h"
#include "heft/profile/system_sampler.h"
#include "support/files.h"
#include "support/heft_process.h"

namespace {

using heft::profile::SystemSample;
const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kToken = "host-sampling-token";

TEST(HostSampling, RankSampleRoundTripsThroughItsText) {
  SystemSample s;
  s.host = "node-b";
  s.timestamp = 1764100000.25;
  s.cores = 8;
  s.memory_mb = 2048.5;
  s.memory_available_mb = 1024.25;
  heft::profile::RankSample r;
  r.cpu_percent = 150.5;
  r.user_percent = 140.25;
  r.system_percent = 10.25;
  r.rss_mb = 512.5;
  r.read_mb_s = 1.5;
  r.write_mb_s = 2.5;
  r.threads = 9;
  r.processes = 3;
  s.ranks.push_back(r);
  s.core_busy_percent = {10, 90.5};
  SystemSample d;
  ASSERT_TRUE(heft::profile::decode_rank_sample(heft::profile::encode_rank_sample(s), 5, &d));
  EXPECT_EQ(d.host, "node-b");
  EXPECT_NEAR(d.timestamp, s.timestamp, 1e-3);
  EXPECT_EQ(d.cores, 8);
  EXPECT_NEAR(d.memory_mb, 2048.5, 1e-9);
  EXPECT_NEAR(d.memory_available_mb, 1024.25, 1e-9);
  ASSERT_EQ(d.ranks.size(), 1u);
  EXPECT_EQ(d.ranks[0].rank, 5);
  EXPECT_NEAR(d.ranks[0].cpu_percent, 150.5, 1e-9);
  EXPECT_NEAR(d.ranks[0].system_percent, 10.25, 1e-9);
  EXPECT_NEAR(d.ranks[0].rss_mb, 512.5, 1e-9);
  EXPECT_EQ(d.ranks[0].threads, 9);
  EXPECT_EQ(d.ranks[0].processes, 3);
  ASSERT_EQ(d.core_busy_percent.size(), 2u);
  EXPECT_NEAR(d.core_busy_percent[1], 90.5, 1e-9);
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-3 a 1 2 3", 0, &d));
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-2 a 1 2 3", 0, &d));
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-2 a 1 2 x 0 0 0 0 0 0 0 0 1", 0, &d));
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-2 a 1 2 3 4 5 0 0 0 0 0 0 1 z", 0, &d));
  // A heft-sample-2 cut short of its memory fields is an error, not read as an older sample.
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-2 a 1 2 3 0 0 0 0 0 0 1", 0, &d));
}

// A shim of an older heft publishes "heft-sample-1", without the host's memory: it still
// parses, its fields in place and the memory left unknown (0).
TEST(HostSampling, AnOlderShimsSampleWithoutMemoryStillParses) {
  SystemSample d;
  d.memory_mb = 99;
  ASSERT_TRUE(heft::profile::decode_rank_sample(
      "heft-sample-1 node-a 1764100000.250 4 150.500 140.250 10.250 512.500 1.500 2.500 9 3 "
      "10.000 90.500",
      2, &d));
  EXPECT_EQ(d.host, "node-a");
  EXPECT_EQ(d.cores, 4);
  EXPECT_EQ(d.memory_mb, 0);
  EXPECT_EQ(d.memory_available_mb, 0);
  ASSERT_EQ(d.ranks.size(), 1u);
  EXPECT_EQ(d.ranks[0].rank, 2);
  EXPECT_NEAR(d.ranks[0].cpu_percent, 150.5, 1e-9);
  EXPECT_NEAR(d.ranks[0].rss_mb, 512.5, 1e-9);
  EXPECT_EQ(d.ranks[0].threads, 9);
  EXPECT_EQ(d.ranks[0].processes, 3);
  EXPECT_EQ(d.core_busy_percent, (std::vector<double>{10, 90.5}));
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-1 a 1 2 x 0 0 0 0 0 0 1", 0, &d));
  EXPECT_FALSE(heft::profile::decode_rank_sample("heft-sample-1 a 1 2 3 0 0 0 0 0 0 1 z", 0, &d));
}

// This machine's memory as the sampler reads it: MemTotal is the kernel's total RAM, as
// sysconf counts it.
TEST(HostSampling, SamplerReadsThisMachinesMemory) {
  double total = 0, available = 0;
  heft::profile::SystemSampler::memory(&total, &available);
  const double pages_mb = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1 << 20);
  EXPECT_NEAR(total, pages_mb, 1.0);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, total);
  heft::profile::SystemSampler sampler;
  const SystemSample s = sampler.sample();
  EXPECT_NEAR(s.memory_mb, total, 1.0);
  EXPECT_GT(s.memory_available_mb, 0);
}

// A shim of rank `rank` of 2 (one a host, hosts host-a and host-b) running `script`.
std::unique_ptr<heft::test::HeftProcess> start_shim(const heft::test::TempDir& dir,
                                                    const heft::comm::TcpStoreServer& store,
                                                    int rank, const std::string& script) {
  return std::make_unique<heft::test::HeftProcess>(
      kHeft, std::vector<std::string>{"mpi-worker", "--", "sh", "-c", script},
      dir.path() + "/shim-" + std::to_string(rank),
      std::vector<std::pair<std::string, std::string>>{
          {"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", "2"},
          {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"},
          {"HEFT_MPI_HOSTS", "host-a,host-b"},
          {"HEFT_STORE", "127.0.0.1:" + std::to_string(store.port())},
          {"HEFT_TOKEN", kToken}, {"HEFT_JOB", "sampled"}, {"HEFT_SYSTEM_SAMPLE_MS", "200"}});
}

const char* kBusy = "end=$(( $(date +%s) + 4 )); while [ $(date +%s) -lt $end ]; do :; done";

TEST(HostSampling, ShimPublishesItsRanksProcessGroupAndHostInTheStore) {
  heft::test::TempDir dir;
  heft::comm::TcpStoreServer store({"127.0.0.1", 0, kToken});
  auto shim = start_shim(dir, store, 1, kBusy);
  SystemSample s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline) {
    const auto text = store.peek(heft::profile::rank_sample_key("sampled", 1));
    if (text && heft::profile::decode_rank_sample(*text, 1, &s) && !s.ranks.empty() &&
        s.ranks[0].cpu_percent > 5)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(s.ranks.size(), 1u) << "no sample of rank 1 with its CPU busy in the store";
  EXPECT_EQ(s.host, "host-b");
  EXPECT_EQ(s.cores, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GT(s.ranks[0].cpu_percent, 5);
  EXPECT_GE(s.ranks[0].processes, 1);  // sh, and its date children at times
  EXPECT_GT(s.ranks[0].rss_mb, 0);
  EXPECT_EQ(s.core_busy_percent.size(), static_cast<size_t>(s.cores));
  double total = 0, available = 0;
  heft::profile::SystemSampler::memory(&total, &available);
  EXPECT_NEAR(s.memory_mb, total, 1.0);  // the shim's host is this machine here
  EXPECT_GT(s.memory_available_mb, 0);
  const auto end = shim->wait(std::chrono::seconds(20));
  EXPECT_EQ(end.exit_code, 0) << heft::test::describe(end);
}

TEST(HostSampling, ProfilerRecordsRanksOfOtherHostsAsTheirSystemSeries) {
  heft::test::TempDir dir;
  heft::comm::TcpStoreServer store({"127.0.0.1", 0, kToken});
  auto spec = heft::job::parse_spec(
      "name: sampled\nentry_point: [sh]\ncluster: {instance_count: 2, processes_per_host: 1}\n"
      "profiler: {interval_s: 0.2}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  auto db = heft::job::JobDb::open(dir.path() + "/jobs.db");
  const heft::job::JobPaths paths = heft::job::job_paths(dir.path(), "sampled");
  auto record = db->create_job("sampled", nlohmann::json::object(), paths.root, 2, 2);
  ASSERT_TRUE(record.ok());
  const int64_t id = record.value().id;
  heft::profile::JobProfiler profiler(*db, id, spec.value(), paths, "test");
  EXPECT_EQ(profiler.environment()["HEFT_SYSTEM_SAMPLE_MS"], "200");
  profiler.set_sample_source([&store](const std::string& key) { return store.peek(key); });
  auto busy = start_shim(dir, store, 0, kBusy);
  auto idle = start_shim(dir, store, 1, "sleep 4");
  profiler.on_start(0, {});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (std::chrono::steady_clock::now() < deadline &&
         profiler.observations().hosts.size() < 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    profiler.on_tick();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  profiler.on_tick();
  const heft::profile::Observations& obs = profiler.observations();
  ASSERT_EQ(obs.hosts.size(), 2u);
  EXPECT_EQ(obs.hosts.at("host-a").ranks, std::vector<int>{0});
  EXPECT_EQ(obs.hosts.at("host-b").ranks, std::vector<int>{1});
  EXPECT_EQ(obs.host_of_rank.at(1), "host-b");
  EXPECT_EQ(obs.workers_here, 1);  // one rank a host, not the world
  // Each host's reads, for the host-wide rules: its cores and only its own ranks.
  ASSERT_FALSE(obs.hosts.at("host-b").samples.empty());
  for (const SystemSample& h : obs.hosts.at("host-b").samples) {
    EXPECT_EQ(h.host, "host-b");
    EXPECT_EQ(h.core_busy_percent.size(), static_cast<size_t>(h.cores));
    ASSERT_EQ(h.ranks.size(), 1u);
    EXPECT_EQ(h.ranks[0].rank, 1);
  }
  std::set<int> ranks;
  for (const auto& p : db->metrics(id, "system:cpu_percent")) ranks.insert(p.rank);
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_FALSE(db->metrics(id, "system:host-b/core0_busy_percent").empty());
  // Rank 1 alone on host-b may use all of its cores.
  const int cores = obs.hosts.at("host-b").cores;
  EXPECT_NEAR(obs.worker_utilisation(100.0 * cores, 1), 100.0, 1e-9);
  profiler.on_end(false);
  busy->wait(std::chrono::seconds(20));
  idle->wait(std::chrono::seconds(20));
}

// Regression (BatchSize took the supervisor's memory for every rank): the profiler keeps each
// host's memory from its shims' samples, and BatchSize judges a rank by its own host's memory.
// Rank 0 on "small" (2000 MB, less than this machine) uses 600 MB, 30% of its host: no finding,
// where this machine's memory would have made it one. Rank 1's host sent an older sample
// without memory: it is judged by this machine's, as before.
TEST(HostSampling, BatchSizeJudgesARankByItsOwnHostsMemory) {
  heft::test::TempDir dir;
  auto spec = heft::job::parse_spec(
      "name: sampled\nentry_point: [sh]\ncluster: {instance_count: 2, processes_per_host: 1}\n"
      "profiler: {interval_s: 0.2}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.error();
  auto db = heft::job::JobDb::open(dir.path() + "/jobs.db");
  const heft::job::JobPaths paths = heft::job::job_paths(dir.path(), "sampled");
  auto record = db->create_job("sampled", nlohmann::json::object(), paths.root, 2, 2);
  ASSERT_TRUE(record.ok());
  heft::profile::JobProfiler profiler(*db, record.value().id, spec.value(), paths, "test");
  const double now = heft::job::unix_now();
  profiler.set_sample_source([now](const std::string& key) -> std::optional<std::string> {
    if (key == heft::profile::rank_sample_key("sampled", 0))
      return "heft-sample-2 small " + std::to_string(now) + " 2 2000 1500 30 30 0 600 0 0 4 1 10 20";
    if (key == heft::profile::rank_sample_key("sampled", 1))
      return "heft-sample-1 old " + std::to_string(now) + " 2 30 30 0 600 0 0 4 1 10 20";
    return std::nullopt;
  });
  profiler.on_start(0, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // past profiler.interval_s
  profiler.on_tick();  // one read of both ranks' samples
  profiler.on_end(false);
  const heft::profile::Observations& obs = profiler.observations();
  ASSERT_GT(obs.memory_mb, 4000) << "this machine must have more memory than host 'small'";
  EXPECT_EQ(obs.hosts.at("small").memory_mb, 2000);
  EXPECT_EQ(obs.hosts.at("old").memory_mb, 0);
  EXPECT_EQ(obs.memory_of(0), 2000);
  EXPECT_EQ(obs.memory_of(1), obs.memory_mb / obs.workers_here);
  const auto available = db->metrics(record.value().id, "system:small/memory_available_mb");
  ASSERT_EQ(available.size(), 1u);
  EXPECT_EQ(available[0].value, 1500);
  EXPECT_TRUE(db->metrics(record.value().id, "system:old/memory_available_mb").empty());
  // The rule over 10 such reads (its patience).
  heft::profile::Observations reads = obs;
  ASSERT_EQ(reads.system.size(), 1u);
  for (int i = 1; i < 10; ++i) reads.system.push_back(reads.system.front());
  const heft::job::RuleInfo* info = heft::job::find_rule("BatchSize");
  ASSERT_NE(info, nullptr);
  const auto f = heft::profile::evaluate_rule(heft::job::rule_with_defaults(*info), reads);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_EQ(f[0].evidence["host"], "old");
  EXPECT_NEAR(f[0].evidence["memory_share_mb"].get<double>(), obs.memory_mb / obs.workers_here,
              1e-9);
}

TEST(HostSampling, DescribeListsTheHostsWithTheirCoresAndRanks) {
  heft::test::TempDir dir;
  const std::string spec = dir.path() + "/spec.yaml";
  std::ofstream(spec) << "name: hosts\nentry_point: [" HEFT_BINARY_DIR
                         "/test-workers/step_worker, --steps, 80]\n"
                         "cluster: {instance_count: 1, processes_per_host: 2}\n"
                         "profiler: {interval_s: 0.2}\n";
  auto heft = [&](const std::vector<std::string>& args, const std::string& out) {
    heft::test::HeftProcess p(kHeft, args, dir.path() + "/" + out,
                              {{"HEFT_HOME", dir.path() + "/home"}});
    return p.wait(std::chrono::seconds(90));
  };
  const auto run = heft({"train", spec}, "train");
  ASSERT_EQ(run.exit_code, 0) << heft::test::describe(run);
  const auto d = heft({"describe", "hosts", "--json"}, "describe");
  ASSERT_EQ(d.exit_code, 0) << heft::test::describe(d);
  const nlohmann::json hosts = d.json()["hosts"];
  ASSERT_EQ(hosts.size(), 1u) << hosts.dump();
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  EXPECT_EQ(hosts[0]["host"], name);
  EXPECT_EQ(hosts[0]["cores"], ::sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(hosts[0]["ranks"], nlohmann::json({0, 1}));
  const auto text = heft({"describe", "hosts"}, "describe-text");
  EXPECT_NE(text.out.find("Hosts:\n  " + std::string(name) + ": "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("cores, ranks 0, 1\n"), std::string::npos) << text.out;
}

}  // namespace
