// ctest-labels: multiproc
// Sharded checkpoints that reshard, end to end through `heft run` and heft-train's GPT: a
// run of 4 ranks sharded 4 ways stops at step 6; its checkpoint is resumed by 4 ranks in
// hybrid shards of 2, by 2 ranks sharded, by 2 data-parallel ranks and by one process, and
// each one's steps 7 and 8 give the loss of an uninterrupted run. Bad input exits 2 naming
// what is wrong, with the checkpoint directory untouched: a degree that does not divide
// the data-parallel ranks, a checkpoint of another model shape. Tensor-parallel checkpoints
// load at other tensor degrees, and bad tensor degrees are named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "support/command.h"

namespace {

namespace fs = std::filesystem;
using heft::test::run_command;

const std::string kBin = HEFT_BINARY_DIR;

// The global loss of the newest checkpoint (full precision) and its step.
std::pair<int64_t, double> newest_checkpoint(const fs::path& dir) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && (newest.empty() || e.path() > newest)) newest = e.path();
  }
  std::ifstream in(newest / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  return {m.at("step").get<int64_t>(), m.at("meta").at("loss").get<double>()};
}

// Every path under dir with its size and write time, to show nothing changed.
std::set<std::string> snapshot(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    out.insert(e.path().string() + " " +
               (e.is_regular_file() ? std::to_string(e.file_size()) : std::string("dir")) + " " +
               std::to_string(e.last_write_time().time_since_epoch().count()));
  return out;
}

class Reshard : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists("/usr/share/games/fortunes/fortunes"))
      GTEST_SKIP() << "the Debian package fortunes is not installed";
    root_ = fs::temp_directory_path() / ("heft-reshard-test-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // heft run -n ranks heft-train gpt (small), checkpointing at the end into root_/ckpt.
  heft::test::CommandOutput train(int ranks, int sdp, int max_steps, const std::string& ckpt,
                                  const std::string& extra = "") {
    return run_command("env -u HEFT_STORE -u SM_CHECKPOINT_DIR -u HEFT_CHECKPOINT "
                       "OMP_NUM_THREADS=1 " + kBin + "/heft run -n " + std::to_string(ranks) +
                       " -- " + kBin + "/heft-train --model gpt --n_layer 2 --n_head 4 "
                       "--n_embd 32 --block_size 16 --batch_size 8 --lr 0.003 "
                       "--lr_schedule constant --warmup_steps 2 --seed 7 --eval false "
                       "--log_every 1 --sharded_data_parallel_degree " + std::to_string(sdp) +
                       " --max_steps " + std::to_string(max_steps) + " --checkpoint_dir " +
                       (root_ / ckpt).string() + " " + extra);
  }
  fs::path root_;
};

TEST_F(Reshard, FourShardedResumesAtOtherLayoutsWithTheUninterruptedLoss) {
  const auto whole = train(1, 1, 8, "whole");
  ASSERT_EQ(whole.code, 0) << whole.text;
  const auto [whole_step, whole_loss] = newest_checkpoint(root_ / "whole");
  ASSERT_EQ(whole_step, 8);

  const auto first = train(4, 4, 6, "four");
  ASSERT_EQ(first.code, 0) << first.text;
  ASSERT_EQ(newest_checkpoint(root_ / "four").first, 6);
  ASSERT_TRUE(fs::exists(root_ / "four" / "ckpt-000000000006" / "part-00003" / "unit-00000.pt"))
      << "a sharded checkpoint has a part per rank";

  struct Layout {
    const char* name;
    int ranks, sdp;
  };
  for (const Layout& l : {Layout{"hybrid 4 in shards of 2", 4, 2}, Layout{"2 sharded", 2, 2},
                          Layout{"2 data parallel", 2, 1}, Layout{"1 process", 1, 1}}) {
    const std::string copy = std::string("copy-") + std::to_string(l.ranks) + "-" + std::to_string(l.sdp);
    fs::copy(root_ / "four", root_ / copy, fs::copy_options::recursive);
    const auto resumed = train(l.ranks, l.sdp, 8, copy);
    ASSERT_EQ(resumed.code, 0) << l.name << ":\n" << resumed.text;
    EXPECT_NE(resumed.text.find("resumed: step=6"), std::string::npos) << l.name << resumed.text;
    const auto [step, loss] = newest_checkpoint(root_ / copy);
    EXPECT_EQ(step, 8) << l.name;
    EXPECT_NEAR(loss, whole_loss, 1e-4 * std::abs(whole_loss))
        << l.name << ": step 8's loss after resuming differs from the uninterrupted run's";
  }
}

// Tensor-parallel checkpoints in the same form: written at T = 2, read at T = 1 (one
// process), T = 4, and T = 2 x data 2; and a T = 1 checkpoint read at T = 2.
TEST_F(Reshard, TensorParallelCheckpointsLoadAtAnotherDegree) {
  const auto whole = train(1, 1, 8, "whole");
  ASSERT_EQ(whole.code, 0) << whole.text;
  const double whole_loss = newest_checkpoint(root_ / "whole").second;
  const auto first = train(2, 1, 6, "tp2", "--tensor_parallel_degree 2");
  ASSERT_EQ(first.code, 0) << first.text;
  const auto single = train(1, 1, 6, "one");
  ASSERT_EQ(single.code, 0) << single.text;
  struct Layout {
    const char* name;
    const char* from;
    int ranks, sdp;
    const char* extra;
  };
  for (const Layout& l : {Layout{"T=2 -> 1 process", "tp2", 1, 1, ""},
                          Layout{"T=2 -> T=4", "tp2", 4, 1, "--tensor_parallel_degree 4"},
                          Layout{"T=2 -> T=2 x data 2", "tp2", 4, 1, "--tensor_parallel_degree 2"},
                          Layout{"T=2 -> T=2 x sharded 2", "tp2", 4, 2, "--tensor_parallel_degree 2"},
                          Layout{"1 process -> T=2", "one", 2, 1, "--tensor_parallel_degree 2"}}) {
    static int copies = 0;
    const std::string copy = "copy-" + std::to_string(++copies);
    fs::copy(root_ / l.from, root_ / copy, fs::copy_options::recursive);
    const auto resumed = train(l.ranks, l.sdp, 8, copy, l.extra);
    ASSERT_EQ(resumed.code, 0) << l.name << ":\n" << resumed.text;
    EXPECT_NE(resumed.text.find("resumed: step=6"), std::string::npos) << l.name << resumed.text;
    EXPECT_NEAR(newest_checkpoint(root_ / copy).second, whole_loss, 1e-4 * std::abs(whole_loss))
        << l.name << ": step 8's loss after resuming differs from the uninterrupted run's";
  }
}

TEST_F(Reshard, BadTensorDegreesExit2NamingTheField) {
  const auto heads = train(2, 1, 2, "h", "--tensor_parallel_degree 2 --n_head 3 --n_embd 33");
  EXPECT_EQ(heads.code, 2) << heads.text;
  EXPECT_NE(heads.text.find("n_head (3) is not divisible by tensor_parallel_degree 2"),
            std::string::npos)
      << heads.text;
  const auto world = train(4, 1, 2, "w", "--tensor_parallel_degree 3");
  EXPECT_EQ(world.code, 2) << world.text;
  EXPECT_NE(world.text.find("tensor_parallel_degree: 3 x partitions 1 must divide the 4 workers"),
            std::string::npos)
      << world.text;
  const auto cnn = run_command("env -u HEFT_STORE OMP_NUM_THREADS=1 " + kBin + "/heft run -n 2 -- " +
                               kBin + "/heft-train --model mlp --tensor_parallel_degree 2 "
                               "--max_steps 1 --eval false");
  EXPECT_EQ(cnn.code, 2) << cnn.text;
  EXPECT_NE(cnn.text.find("model mlp has no tensor-parallel form"), std::string::npos) << cnn.text;
}

TEST_F(Reshard, BadDegreeOtherModelAndDataParallelCheckpointExit2NamingThem) {
  const auto bad_degree = train(4, 3, 2, "bad");
  EXPECT_EQ(bad_degree.code, 2) << bad_degree.text;
  EXPECT_NE(bad_degree.text.find("sharded_data_parallel_degree: expected a divisor of the "
                                 "data-parallel degree 4, found 3"),
            std::string::npos)
      << bad_degree.text;

  ASSERT_EQ(train(2, 2, 2, "sharded").code, 0);
  const auto before = snapshot(root_ / "sharded");
  const auto wider = train(2, 2, 4, "sharded", "--n_embd 48");
  EXPECT_EQ(wider.code, 2) << wider.text;
  EXPECT_NE(wider.text.find("checkpoint: parameter "), std::string::npos) << wider.text;
  EXPECT_NE(wider.text.find("has shape"), std::string::npos) << wider.text;
  EXPECT_EQ(snapshot(root_ / "sharded"), before) << "a refused resume changed the checkpoints";

  // A data-parallel checkpoint (its parts hold whole replicas) loads sharded.
  ASSERT_EQ(train(2, 1, 2, "ddp").code, 0);
  const auto into_sharded = train(2, 2, 4, "ddp");
  EXPECT_EQ(into_sharded.code, 0) << into_sharded.text;
  EXPECT_NE(into_sharded.text.find("resumed: step=2"), std::string::npos) << into_sharded.text;
}

}  // namespace

namespace {

// A sharded job interrupted twice (simulated spot) resumes from its sharded checkpoints and
// ends with the loss of an uninterrupted one. The reclaims come a fifth of the uninterrupted
// run's time after each start: late enough that training has begun (and checkpointed on its
// SIGTERM) however slow the workers' start-up is on this machine now (a fixed 1 s came before
// the first step when three copies of this test ran beside a busy loop), and early enough that
// two attempts cannot finish the job unless they ran 2.5x faster than the uninterrupted run.
// A third (whole seconds, 1000 steps) left a factor of 1.5 only, and under `ctest -j2` an
// uninterrupted run beside the heaviest tests and an interrupted one alone differ by that: the
// job then saw one interruption, not two.
TEST_F(Reshard, SpotInterruptedShardedJobEndsLikeAnUninterruptedOne) {
  if (!fs::exists(kBin + "/heft")) GTEST_SKIP() << "no heft binary";
  const fs::path home = root_ / "home";
  std::ofstream(root_ / "spec.yaml")
      << "name: spot\n"
         "entry_point: heft-train\n"
         "hyperparameters: {model: gpt, n_layer: 2, n_head: 2, n_embd: 64, block_size: 32, "
         "batch_size: 8, max_steps: 2000, lr_schedule: constant, seed: 3, eval: false, "
         "log_every: 100}\n"
         "cluster: {instance_count: 1, processes_per_host: 2}\n"
         "distribution: {modelparallel: {enabled: true, parameters: "
         "{sharded_data_parallel_degree: 2}}}\n"
         "checkpoint: {every_steps: 10, keep: 2}\n"
         "environment: {OMP_NUM_THREADS: \"1\"}\n";
  const std::string heft = "env -u HEFT_STORE HEFT_HOME=" + home.string() + " " + kBin + "/heft ";
  const std::string spec = (root_ / "spec.yaml").string();
  const auto started = std::chrono::steady_clock::now();
  const auto plain = run_command(heft + "train " + spec + " --name plain");
  ASSERT_EQ(plain.code, 0) << plain.text;
  const double plain_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  const std::string every_s = std::to_string(std::max(1.0, plain_s / 5));
  const auto spot = run_command(heft + "train " + spec +
                                " --name spot --set 'spot={enabled: true, simulate: {every_s: " +
                                every_s + ", count: 2}}'");
  ASSERT_EQ(spot.code, 0) << spot.text;
  const auto described = run_command(heft + "describe spot --json");
  const nlohmann::json d = nlohmann::json::parse(described.text, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << described.text;
  EXPECT_EQ(d.value("status", ""), "Completed") << described.text;
  EXPECT_EQ(d.value("interruptions", -1), 2) << "reclaims every " << every_s << " s\n" << described.text;
  const auto logs = run_command(heft + "logs spot --rank 0");
  EXPECT_NE(logs.text.find("resumed: step="), std::string::npos) << logs.text;
  const auto [a_step, a] = newest_checkpoint(home / "jobs" / "plain" / "checkpoints");
  const auto [b_step, b] = newest_checkpoint(home / "jobs" / "spot" / "checkpoints");
  EXPECT_EQ(a_step, 2000);
  EXPECT_EQ(b_step, 2000);
  EXPECT_LE(std::abs(a - b), 1e-6 * std::abs(a)) << "uninterrupted " << a << " resumed " << b;
}

}  // namespace

namespace {

// Pipeline checkpoints: each stage writes its layers; read at 1 stage (one process), at 4
// stages, and a 1-stage checkpoint read at 2 stages x data 2.
TEST_F(Reshard, PipelineCheckpointsLoadAtAnotherNumberOfPartitions) {
  const auto whole = train(1, 1, 8, "whole");
  ASSERT_EQ(whole.code, 0) << whole.text;
  const double whole_loss = newest_checkpoint(root_ / "whole").second;
  ASSERT_EQ(train(2, 1, 6, "pp2", "--partitions 2 --microbatches 4").code, 0);
  ASSERT_EQ(train(1, 1, 6, "one").code, 0);
  struct Layout {
    const char* name;
    const char* from;
    int ranks;
    const char* extra;
  };
  int copies = 0;
  for (const Layout& l : {Layout{"p=2 -> 1 process", "pp2", 1, ""},
                          Layout{"p=2 -> p=4", "pp2", 4, "--partitions 4 --microbatches 2"},
                          Layout{"1 process -> p=2 x data 2", "one", 4, "--partitions 2 --microbatches 2"}}) {
    const std::string copy = "pcopy-" + std::to_string(++copies);
    fs::copy(root_ / l.from, root_ / copy, fs::copy_options::recursive);
    const auto resumed = train(l.ranks, 1, 8, copy, l.extra);
    ASSERT_EQ(resumed.code, 0) << l.name << ":\n" << resumed.text;
    EXPECT_NE(resumed.text.find("resumed: step=6"), std::string::npos) << l.name << resumed.text;
    EXPECT_NEAR(newest_checkpoint(root_ / copy).second, whole_loss, 1e-4 * std::abs(whole_loss))
        << l.name << ": step 8's loss after resuming differs from the uninterrupted run's";
  }
}

// The spec's manual split: partition_boundaries where given, else an even split whose
// remainder goes to default_partition; the plan table says which layers each stage holds.
TEST_F(Reshard, ManualPartitionFromTheSpec) {
  const auto run = [&](int ranks, const std::string& parameters) {
    return run_command("env -u HEFT_STORE OMP_NUM_THREADS=1 HEFT_DISTRIBUTION='{\"modelparallel\": "
                       "{\"enabled\": true, \"parameters\": {\"auto_partition\": false, " +
                       parameters + "}}}' " + kBin + "/heft run -n " + std::to_string(ranks) +
                       " -- " + kBin + "/heft-train --model gpt --n_layer 2 --n_head 4 "
                       "--n_embd 32 --block_size 16 --batch_size 8 --max_steps 2 --eval false");
  };
  const auto even = run(3, "\"partitions\": 3, \"default_partition\": 1");
  ASSERT_EQ(even.code, 0) << even.text;
  EXPECT_NE(even.text.find("a manual split (not profiled)"), std::string::npos) << even.text;
  for (const char* row : {"0      embedding (1 layers)", "1      block.0 .. block.1 (2 layers)",
                          "2      head (1 layers)"})
    EXPECT_NE(even.text.find(row), std::string::npos) << row << " in:\n" << even.text;
  const auto given = run(2, "\"partitions\": 2, \"partition_boundaries\": [3]");
  ASSERT_EQ(given.code, 0) << given.text;
  for (const char* row : {"0      embedding .. block.1 (3 layers)", "1      head (1 layers)"})
    EXPECT_NE(given.text.find(row), std::string::npos) << row << " in:\n" << given.text;
  const auto beyond = run(2, "\"partitions\": 2, \"partition_boundaries\": [4]");
  EXPECT_EQ(beyond.code, 2) << beyond.text;
  EXPECT_NE(beyond.text.find("partition_boundaries: expected ascending layer indices from 1 to 3, "
                             "found 4"), std::string::npos) << beyond.text;
}

// HEFT_DISTRIBUTION is the job's resolved distribution (heft train resolves the spec's block
// with the hyperparameters over it): the worker merges nothing. A flag that agrees with it
// runs; one that would change a knob is refused, naming the flag, both values and where to
// set it; heft-train alone (no HEFT_DISTRIBUTION) takes its flags as the distribution.
TEST_F(Reshard, FlagsBesideTheResolvedDistributionMustAgree) {
  const auto run = [&](const std::string& distribution, const std::string& flags) {
    return run_command("env -u HEFT_STORE -u HEFT_DISTRIBUTION OMP_NUM_THREADS=1 " +
                       (distribution.empty() ? std::string()
                                             : "HEFT_DISTRIBUTION='" + distribution + "'") +
                       " " + kBin + "/heft run -n 2 -- " + kBin + "/heft-train --model gpt "
                       "--n_layer 2 --n_head 4 --n_embd 32 --block_size 16 --batch_size 8 "
                       "--max_steps 1 --eval false " + flags);
  };
  const std::string two = R"({"modelparallel": {"enabled": true, "parameters": {"partitions": 2}}})";
  const auto agree = run(two, "--partitions 2");
  EXPECT_EQ(agree.code, 0) << agree.text;
  const auto differ = run(two, "--partitions 1 --microbatches 2");
  EXPECT_NE(differ.code, 0) << differ.text;
  for (const char* part : {"flags beside HEFT_DISTRIBUTION", "hyperparameters.microbatches 2 "
                           "(HEFT_DISTRIBUTION: 1)", "set these knobs in the job's spec"})
    EXPECT_NE(differ.text.find(part), std::string::npos) << part << " in:\n" << differ.text;
  const auto alone = run("", "--partitions 2");
  EXPECT_EQ(alone.code, 0) << alone.text;
  EXPECT_NE(alone.text.find("strategy: pipeline (2 stages"), std::string::npos) << alone.text;
}

TEST_F(Reshard, BadPipelineSettingsExit2NamingTheField) {
  // 2 blocks + embedding + head = 4 layers.
  const auto layers = train(8, 1, 2, "l", "--partitions 8");
  EXPECT_EQ(layers.code, 2) << layers.text;
  EXPECT_NE(layers.text.find("partitions: expected 1 to the model's 4 layers, found 8"),
            std::string::npos)
      << layers.text;
  const auto micro = train(2, 1, 2, "m", "--partitions 2 --microbatches 3");
  EXPECT_EQ(micro.code, 2) << micro.text;
  EXPECT_NE(micro.text.find("microbatches: 3 does not divide this data-parallel rank's share of "
                            "the batch (8 samples)"),
            std::string::npos)
      << micro.text;
  const auto bounds = train(2, 1, 2, "b", "--partitions 2 --partition_boundaries 9");
  EXPECT_EQ(bounds.code, 2) << bounds.text;
  EXPECT_NE(bounds.text.find("partition_boundaries: expected ascending layer indices from 1 to 3, "
                             "found 9"),
            std::string::npos)
      << bounds.text;
  const auto world = train(3, 1, 2, "w", "--partitions 2");
  EXPECT_EQ(world.code, 2) << world.text;
  EXPECT_NE(world.text.find("partitions 2 must divide the 3 workers"), std::string::npos) << world.text;
}

}  // namespace
