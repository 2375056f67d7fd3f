// ctest-labels: multiproc
// Same result twice, for the main job (examples/fashion-mnist.yaml: heft-train's CNN, data
// parallel over 2 simulated hosts x 2 workers), shortened to one short epoch: two runs print
// the same loss at every step and end with the same parameters, bit for bit, and a run
// interrupted (a simulated spot reclaim: SIGTERM, checkpoint, restart) and resumed from its
// checkpoint prints the uninterrupted run's losses after it and ends with its parameters
// (docs/comm.md, "Same result twice").
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/command.h"

namespace {

namespace fs = std::filesystem;
using heft::test::CommandOutput;
using heft::test::run_command;

const std::string kBin = HEFT_BINARY_DIR;
const std::string kSpec = HEFT_SOURCE_DIR "/examples/fashion-mnist.yaml";
const std::string kData = "/usr/share/datasets/fashion-mnist";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// Rank 0's "step=N epoch=E loss=L" by step (lr and throughput cut off), its resumed: lines,
// and its final line's "step=N loss=L test_acc=A".
struct Log {
  std::map<long, std::string> steps;
  int resumes = 0;
  long resumed_at = -1;  // the step the last resumed: line names
  std::string final_line;
};

Log parse(const std::string& text) {
  Log log;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("resumed: step=", 0) == 0) {
      ++log.resumes;
      log.resumed_at = std::stol(line.substr(14));
    }
    if (line.rfind("final: ", 0) == 0)
      log.final_line = line.substr(0, line.find(" samples_per_s="));
    if (line.rfind("step=", 0) != 0 || line.find(" loss=") == std::string::npos) continue;
    const long step = std::stol(line.substr(5));
    log.steps[step] = line.substr(0, line.find(" lr="));
  }
  return log;
}

// The full-precision loss of the newest checkpoint's manifest.
double checkpoint_loss(const fs::path& dir) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0 && e.path() > newest) newest = e.path();
  const nlohmann::json m = nlohmann::json::parse(read_file(newest / "manifest.json"));
  return m.at("meta").at("loss").get<double>();
}

class MainJob : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kData + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
    root_ = fs::temp_directory_path() / ("heft-determinism-" + std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!root_.empty() && !HasFailure()) fs::remove_all(root_);
  }

  // heft train of the main job as `name`, one epoch of 9600 samples (150 steps, ~10 s of
  // training here), a step= line every 5 steps and a checkpoint every 20; one home for all
  // runs (its record of allreduce forms is what a user's later runs read).
  CommandOutput train(const std::string& name, const std::string& extra = "") const {
    return run_command("env -u HEFT_STORE -u HEFT_ALLREDUCE_CACHE HEFT_HOME=" +
                       (root_ / "home").string() + " " + kBin + "/heft train " + kSpec +
                       " --name " + name +
                       " --set hyperparameters.epochs=1 --set hyperparameters.limit=9600"
                       " --set hyperparameters.log_every=5"
                       " --set 'checkpoint={every_steps: 20, keep: 2}' " + extra);
  }
  fs::path job(const std::string& name) const { return root_ / "home" / "jobs" / name; }
  Log log_of(const std::string& name) const {
    return parse(read_file(job(name) / "logs" / "rank-0.log"));
  }

  fs::path root_;
};

TEST_F(MainJob, TwoRunsAndAResumedOneGiveTheSameLossAtEveryStep) {
  const CommandOutput a = train("first");
  ASSERT_EQ(a.code, 0) << a.text;
  const CommandOutput b = train("second");
  ASSERT_EQ(b.code, 0) << b.text;
  const Log la = log_of("first"), lb = log_of("second");
  ASSERT_GE(la.steps.size(), 15u) << read_file(job("first") / "logs" / "rank-0.log");
  EXPECT_NE(la.final_line, "") << "no final: line";
  // Every step's loss, and the end.
  EXPECT_EQ(la.steps, lb.steps);
  EXPECT_EQ(la.final_line, lb.final_line);
  EXPECT_EQ(checkpoint_loss(job("first") / "checkpoints"),
            checkpoint_loss(job("second") / "checkpoints"));
  const std::string model = read_file(job("first") / "model" / "model.pt");
  EXPECT_FALSE(model.empty()) << "no model.pt saved";
  EXPECT_TRUE(model == read_file(job("second") / "model" / "model.pt"))
      << "the two runs' parameters differ";

  // Interrupted mid-training, at 45% of the first run's time (start-up ~30%, training ~60%
  // here; both scale with the machine's load), by SIGTERM: the ranks agree on a step and
  // checkpoint there; restarted, resumed from that checkpoint. A busier machine can move the
  // interruption past the last step line: then again, earlier (the timing is the test's
  // means, not what it checks).
  const auto at = a.text.find("Completed after ");
  ASSERT_NE(at, std::string::npos) << a.text;
  const double whole_s = std::stod(a.text.substr(at + 16));
  std::string resumed;
  Log lc;
  for (const double fraction : {0.45, 0.25, 0.12}) {
    resumed = "resumed-" + std::to_string(static_cast<int>(fraction * 100));
    const std::string every = std::to_string(std::max(2.0, fraction * whole_s));
    const CommandOutput c = train(
        resumed, "--set 'spot={enabled: true, simulate: {every_s: " + every + ", count: 1}}'");
    ASSERT_EQ(c.code, 0) << c.text;
    lc = log_of(resumed);
    if (lc.resumes == 1 && lc.resumed_at < la.steps.rbegin()->first) break;
  }
  ASSERT_EQ(lc.resumes, 1) << "not interrupted and resumed once: "
                           << read_file(job(resumed) / "logs" / "rank-0.log");
  ASSERT_LT(lc.resumed_at, la.steps.rbegin()->first) << "resumed after the last step line";
  size_t compared = 0;
  for (const auto& [step, line] : lc.steps) {
    ASSERT_TRUE(la.steps.count(step)) << "step " << step << " not in the uninterrupted run";
    EXPECT_EQ(line, la.steps.at(step));
    ++compared;
  }
  EXPECT_EQ(compared, la.steps.size()) << "the resumed run skipped or repeated steps";
  EXPECT_EQ(lc.final_line, la.final_line);
  EXPECT_EQ(checkpoint_loss(job(resumed) / "checkpoints"),
            checkpoint_loss(job("first") / "checkpoints"));
  EXPECT_TRUE(read_file(job(resumed) / "model" / "model.pt") == model)
      << "the resumed run's parameters differ from the uninterrupted run's";
}

}  // namespace
