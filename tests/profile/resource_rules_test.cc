// ctest-labels: unit
// The resource rules (IOBottleneck, BatchSize, MaxInitializationTime, OverallSystemUsage,
// Dataloader) on synthetic series: each fires on a case made for it, naming the rank where it
// is about one, and stays silent on a healthy one (the main job's shape: two busy workers on
// two cores, no data wait).
#include <gtest/gtest.h>

#include "heft/job/spec/rule_spec.h"
#include "heft/profile/rules.h"

namespace heft::profile {
namespace {

job::RuleSpec rule(const std::string& name, std::map<std::string, nlohmann::json> params = {}) {
  const job::RuleInfo* info = job::find_rule(name);
  EXPECT_NE(info, nullptr) << name;
  job::RuleSpec r = job::rule_with_defaults(*info);
  for (auto& [k, v] : params) r.parameters[k] = v;
  return r;
}

// `world` workers on `world` cores; `steps` steps per rank whose data share is `data_share`
// (rank `odd` gets `odd_share` instead), and `samples` system samples at `cpu` % of a core,
// `rss_mb` and `processes` per worker.
struct Job {
  Observations o;
  Job(int world, int steps, double data_share, int odd = -1, double odd_share = 0) {
    o.world = o.cores = o.workers_here = world;
    o.started_at = 1000;
    o.now = 1100;
    o.memory_mb = 16000;
    for (int s = 1; s <= steps; ++s)
      for (int r = 0; r < world; ++r) {
        StepRecord x;
        x.rank = r;
        x.step = s;
        x.timestamp = 1001 + s * 0.1;
        x.total_ms = 100;
        x.data_ms = r == odd ? odd_share : data_share;
        x.forward_ms = 100 - x.data_ms;
        o.steps.push_back(x);
      }
  }
  Job& samples(int n, double cpu, double rss_mb = 2000, int processes = 1, double host_busy = -1) {
    for (int i = 0; i < n; ++i) {
      SystemSample s;
      s.timestamp = 1001 + i * 0.5;
      for (int r = 0; r < o.world; ++r) {
        RankSample x;
        x.rank = r;
        x.cpu_percent = cpu;
        x.rss_mb = rss_mb;
        x.processes = processes;
        x.read_mb_s = 40;
        s.ranks.push_back(x);
      }
      if (host_busy >= 0) s.core_busy_percent.assign(static_cast<size_t>(o.cores), host_busy);
      o.system.push_back(s);
    }
    return *this;
  }
};

TEST(ResourceRules, IOBottleneckFiresWhenIdleWorkersWaitOnData) {
  Job io(2, 30, 10, 1, 80);  // rank 1: 80% of each step loading data
  io.samples(10, 20);        // ... with its CPU at 20% of its core
  const auto f = evaluate_rule(rule("IOBottleneck"), io.o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_NE(f[0].message.find("rank 1: 100.0% of 30 steps waited on data"), std::string::npos)
      << f[0].message;
  EXPECT_FALSE(f[0].recommendation.empty());
  // The same wait with a busy CPU is CPUBottleneck's, not IOBottleneck's.
  Job busy(2, 30, 10, 1, 80);
  busy.samples(10, 95);
  EXPECT_TRUE(evaluate_rule(rule("IOBottleneck"), busy.o).empty());
  EXPECT_EQ(evaluate_rule(rule("CPUBottleneck"), busy.o).size(), 1u);
  Job healthy(2, 30, 5);
  healthy.samples(10, 95);
  EXPECT_TRUE(evaluate_rule(rule("IOBottleneck"), healthy.o).empty());
  // Patience: too few steps.
  Job early(2, 5, 10, 1, 80);
  early.samples(10, 20);
  EXPECT_TRUE(evaluate_rule(rule("IOBottleneck"), early.o).empty());
}

TEST(ResourceRules, BatchSizeFiresWhenCoresAndMemoryAreBothUnderused) {
  Job small(2, 10, 5);
  small.samples(20, 30, 300);  // 30% of a core, 300 MB of an 8000 MB share
  const auto f = evaluate_rule(rule("BatchSize"), small.o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].rank, 0);
  EXPECT_EQ(f[1].rank, 1);
  EXPECT_NEAR(f[0].evidence["memory_p95_percent"].get<double>(), 3.75, 1e-9);
  Job busy(2, 10, 5);
  busy.samples(20, 95, 300);  // the cores are used: no room for a larger batch
  EXPECT_TRUE(evaluate_rule(rule("BatchSize"), busy.o).empty());
  Job big(2, 10, 5);
  big.samples(20, 30, 6000);  // idle cores but 75% of the memory share
  EXPECT_TRUE(evaluate_rule(rule("BatchSize"), big.o).empty());
  Job unknown(2, 10, 5);
  unknown.samples(20, 30, 300);
  unknown.o.memory_mb = 0;
  EXPECT_TRUE(evaluate_rule(rule("BatchSize"), unknown.o).empty());
}

TEST(ResourceRules, MaxInitializationTimeFiresOnALateFirstStep) {
  Job late(2, 10, 5);
  late.o.first_step_at = 1000 + 30;
  const auto f = evaluate_rule(rule("MaxInitializationTime", {{"threshold_s", 20}}), late.o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, -1);
  EXPECT_NE(f[0].message.find("the first step ended 30.0 s after the start"), std::string::npos)
      << f[0].message;
  EXPECT_TRUE(evaluate_rule(rule("MaxInitializationTime", {{"threshold_s", 40}}), late.o).empty());
  // No step at all yet: the time so far counts.
  Job none(2, 0, 5);
  const auto g = evaluate_rule(rule("MaxInitializationTime", {{"threshold_s", 60}}), none.o);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].message.find("no step yet, 100.0 s after the start"), std::string::npos);
  // Without first_step_at the earliest step of the current start is used (1001.1 here).
  Job quick(2, 10, 5);
  EXPECT_TRUE(evaluate_rule(rule("MaxInitializationTime", {{"threshold_s", 2}}), quick.o).empty());
}

TEST(ResourceRules, OverallSystemUsageFiresWhenOtherProcessesTakeTheCores) {
  Job crowded(2, 10, 5);
  crowded.samples(20, 40, 2000, 1, 98);  // cores 98% busy, the workers 40% of them
  const auto f = evaluate_rule(rule("OverallSystemUsage"), crowded.o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0].evidence["other_median_percent"].get<double>(), 58, 1e-9);
  // Saturated by the workers themselves: healthy (the main job).
  Job main_job(2, 10, 5);
  main_job.samples(20, 97, 2000, 1, 98);
  EXPECT_TRUE(evaluate_rule(rule("OverallSystemUsage"), main_job.o).empty());
  // Not saturated.
  Job calm(2, 10, 5);
  calm.samples(20, 20, 2000, 1, 60);
  EXPECT_TRUE(evaluate_rule(rule("OverallSystemUsage"), calm.o).empty());
}

TEST(ResourceRules, DataloaderFiresOnTooFewOrTooManyLoaders) {
  // Steps spend 60% on data with no loader process on a 4-core-per-worker host.
  Job few(2, 20, 60);
  few.o.cores = 8;
  few.samples(12, 90, 2000, 1);
  const auto f = evaluate_rule(rule("Dataloader"), few.o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].message.find("rank 0 ran 0 data-loader processes, fewer than 70% of the 4.0 cores"),
            std::string::npos) << f[0].message;
  // 16 loaders for 4 cores: too many, whatever the steps do.
  Job many(2, 20, 5);
  many.o.cores = 8;
  many.samples(12, 90, 2000, 17);
  const auto g = evaluate_rule(rule("Dataloader"), many.o);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NE(g[1].message.find("rank 1 ran 16 data-loader processes, more than 200%"),
            std::string::npos) << g[1].message;
  // The main job: in-process loading that hardly waits.
  Job main_job(2, 20, 3);
  main_job.samples(12, 97, 2000, 1);
  EXPECT_TRUE(evaluate_rule(rule("Dataloader"), main_job.o).empty());
  // Three loaders for four cores and data waits: enough.
  Job enough(2, 20, 60);
  enough.o.cores = 8;
  enough.samples(12, 90, 2000, 4);
  EXPECT_TRUE(evaluate_rule(rule("Dataloader"), enough.o).empty());
}

// A group on other hosts (mpirun, Slurm): each host is judged by its own cores as its ranks'
// shims read them (HostObservation::samples) and its own ranks' CPU, not by the
// supervisor's machine (regression: its calm cores hid a saturated host).
TEST(ResourceRules, OverallSystemUsageJudgesEachHostByItsOwnCores) {
  Job j(4, 10, 5);
  j.samples(20, 40, 2000, 1, 10);  // the supervisor's machine: 10% busy, no worker of its own
  j.o.host_of_rank = {{0, "h1"}, {1, "h1"}, {2, "h2"}, {3, "h2"}};
  for (const auto& [name, busy] : {std::pair<std::string, double>{"h1", 45}, {"h2", 98}}) {
    HostObservation& h = j.o.hosts[name];
    h.cores = 2;
    h.ranks = name == "h1" ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    for (int i = 0; i < 20; ++i) {
      SystemSample s;
      s.timestamp = 1001 + i * 0.5;
      s.host = name;
      s.cores = 2;
      s.core_busy_percent = {busy, busy};
      for (int r : h.ranks) s.ranks.push_back(RankSample{r, 40});  // 40% of 2 cores: theirs
      h.samples.push_back(s);
    }
  }
  const auto f = evaluate_rule(rule("OverallSystemUsage"), j.o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, -1);
  EXPECT_EQ(f[0].evidence["host"], "h2");
  EXPECT_NEAR(f[0].evidence["other_median_percent"].get<double>(), 58, 1e-9);
  EXPECT_EQ(f[0].message.rfind("host h2's cores were 98.0% busy", 0), 0u) << f[0].message;
}

// Dataloader counts the cores of the rank's own host: rank 1 alone on an 8-core host.
TEST(ResourceRules, DataloaderCountsTheCoresOfTheRanksHost) {
  Job few(2, 20, 60);
  few.samples(12, 90, 2000, 1);
  few.o.hosts["big"] = {8, {1}, {}};
  few.o.host_of_rank[1] = "big";
  const auto f = evaluate_rule(rule("Dataloader"), few.o);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_NE(f[0].message.find("rank 0 ran 0 data-loader processes, fewer than 70% of the 1.0 cores"),
            std::string::npos) << f[0].message;
  EXPECT_NE(f[1].message.find("rank 1 on big ran 0 data-loader processes, fewer than 70% of the 8.0 cores"),
            std::string::npos) << f[1].message;
}

// BatchSize divides a rank's RSS by its own host's memory over the ranks sampled there, not
// the supervisor's (regression: every rank was judged by the supervisor's 16000 MB). Rank 0
// alone on "small" (2000 MB) at 600 MB uses 30% of its host: silent, where the supervisor's
// 8000 MB share would have made it 7.5%. Rank 1 alone on "large" (64000 MB) fires with that
// share. A host whose memory is unknown (an older shim's samples) falls back to the
// supervisor's share.
TEST(ResourceRules, BatchSizeJudgesEachRankByItsOwnHostsMemory) {
  Job j(2, 10, 5);
  j.samples(20, 30, 600);
  j.o.host_of_rank = {{0, "small"}, {1, "large"}};
  j.o.hosts["small"].cores = 2;
  j.o.hosts["small"].ranks = {0};
  j.o.hosts["small"].memory_mb = 2000;
  j.o.hosts["large"].cores = 2;
  j.o.hosts["large"].ranks = {1};
  j.o.hosts["large"].memory_mb = 64000;
  const auto f = evaluate_rule(rule("BatchSize"), j.o);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 1);
  EXPECT_EQ(f[0].evidence["host"], "large");
  EXPECT_NEAR(f[0].evidence["memory_share_mb"].get<double>(), 64000, 1e-9);
  EXPECT_NEAR(f[0].evidence["memory_p95_percent"].get<double>(), 100.0 * 600 / 64000, 1e-9);
  EXPECT_NE(f[0].message.find("rank 1 on large used "), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].message.find("of its share of the host's memory (64000 MB)"), std::string::npos)
      << f[0].message;
  // Two ranks on "small" share its memory: 600 MB is 60% of 1000 MB.
  j.o.host_of_rank[1] = "small";
  j.o.hosts["small"].ranks = {0, 1};
  EXPECT_NEAR(j.o.memory_of(1), 1000, 1e-9);
  EXPECT_TRUE(evaluate_rule(rule("BatchSize"), j.o).empty());
  // "small"'s memory unknown: the supervisor's 16000 MB over its 2 workers, 7.5% each.
  j.o.hosts["small"].memory_mb = 0;
  const auto g = evaluate_rule(rule("BatchSize"), j.o);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NEAR(g[0].evidence["memory_share_mb"].get<double>(), 8000, 1e-9);
}

TEST(ResourceRules, NewRulesAreSilentOnTheMainJobsShape) {
  // Two workers on two cores, each 97% busy, 5% of a step on data, 1 GB of RSS, no other load.
  Job main_job(2, 40, 5);
  main_job.o.first_step_at = 1002;
  main_job.samples(30, 97, 1000, 1, 99);
  for (const char* name :
       {"IOBottleneck", "BatchSize", "MaxInitializationTime", "OverallSystemUsage", "Dataloader"})
    EXPECT_TRUE(evaluate_rule(rule(name), main_job.o).empty()) << name;
}

}  // namespace
}  // namespace heft::profile
