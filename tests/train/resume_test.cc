// ctest-labels: multiproc
// heft-train's exact resume: a run stopped (by max_steps, and by SIGTERM) and resumed from
// its checkpoints ends with the same loss and parameters as an uninterrupted run.
#include <gtest/gtest.h>

#include "support/command.h"
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "heft/train/models.h"

namespace {

namespace fs = std::filesystem;

const std::string kBin = HEFT_BINARY_DIR;
const std::string kData = "/usr/share/datasets/fashion-mnist";

using Output = heft::test::CommandOutput;
using heft::test::run_command;

// The full-precision loss of the newest checkpoint's manifest (the final: line has 4 digits).
double checkpoint_loss(const fs::path& dir) {
  fs::path newest;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && (newest.empty() || e.path() > newest)) newest = e.path();
  }
  std::ifstream in(newest / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(in);
  return m.at("meta").at("loss").get<double>();
}

// The largest absolute difference between the parameters of two saved mlp models.
double max_parameter_difference(const fs::path& a, const fs::path& b) {
  auto load = [](const fs::path& p) {
    auto m = heft::train::make_model("mlp");
    torch::serialize::InputArchive archive;
    archive.load_from(p.string());
    m->load(archive);
    return m;
  };
  auto ma = load(a), mb = load(b);
  double worst = 0;
  auto pa = ma->parameters(), pb = mb->parameters();
  EXPECT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i)
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

class ResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kData + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
    root_ = fs::temp_directory_path() /
            ("heft-resume-test-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override {
    if (!root_.empty()) fs::remove_all(root_);
  }

  // heft-train alone, checkpointing into root_/ckpt_name, the model into root_/ckpt_name-model.
  std::string command(const std::string& ckpt_name, const std::string& extra) const {
    return "env -u HEFT_STORE -u SM_CHECKPOINT_DIR -u HEFT_CHECKPOINT OMP_NUM_THREADS=1 " + kBin +
           "/heft-train --model mlp --limit 320 --batch_size 64 --epochs 3 --log_every 1 "
           "--lr 0.05 --momentum 0.9 --warmup_steps 4 --seed 3 --eval false --data " +
           kData + " --checkpoint_dir " + (root_ / ckpt_name).string() + " --model_dir " +
           (root_ / (ckpt_name + "-model")).string() + " " + extra;
  }

  fs::path root_;
};

TEST_F(ResumeTest, StoppedTwiceByMaxStepsAndResumedEndsLikeAnUninterruptedRun) {
  const Output whole = run_command(command("whole", ""));
  ASSERT_EQ(whole.code, 0) << whole.text;
  EXPECT_NE(whole.text.find("final: step=15 "), std::string::npos) << whole.text;

  const Output first = run_command(command("parts", "--max_steps 4"));
  ASSERT_EQ(first.code, 0) << first.text;
  const Output second = run_command(command("parts", "--max_steps 11 --checkpoint_every 3"));
  ASSERT_EQ(second.code, 0) << second.text;
  EXPECT_NE(second.text.find("resumed: step=4 epoch=1\n"), std::string::npos) << second.text;
  const Output third = run_command(command("parts", ""));
  ASSERT_EQ(third.code, 0) << third.text;
  EXPECT_NE(third.text.find("resumed: step=11 epoch=3\n"), std::string::npos) << third.text;
  EXPECT_NE(third.text.find("final: step=15 "), std::string::npos) << third.text;

  const double a = checkpoint_loss(root_ / "whole"), b = checkpoint_loss(root_ / "parts");
  EXPECT_LE(std::abs(a - b), 1e-6 * std::abs(a)) << "uninterrupted " << a << " resumed " << b;
  EXPECT_EQ(max_parameter_difference(root_ / "whole-model" / "model.pt",
                                     root_ / "parts-model" / "model.pt"),
            0.0);
}

// Starts `cmd`, waits until it has printed `lines` step= lines, sends it SIGTERM and
// returns what it printed and its exit code.
Output run_and_terminate(const std::string& cmd, const fs::path& log, int lines) {
  const std::string n = std::to_string(lines);
  return run_command("(" + cmd + " > " + log.string() + " 2>&1 & pid=$!; for i in $(seq 1 3000); do " +
             "[ $(grep -c '^step=' " + log.string() + ") -ge " + n +
             " ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.02; done; " +
             "kill -TERM $pid; wait $pid; rc=$?; cat " + log.string() + "; exit $rc)");
}

TEST_F(ResumeTest, StoppedTwiceBySigtermAndResumedEndsLikeAnUninterruptedRun) {
  // All 60000 samples: 938 steps, so that SIGTERM lands mid-run.
  const std::string more = "--limit 0 --epochs 1";
  const Output whole = run_command(command("whole", more));
  ASSERT_EQ(whole.code, 0) << whole.text;
  EXPECT_NE(whole.text.find("final: step=938 "), std::string::npos) << whole.text;
  for (int part = 1; part <= 2; ++part) {
    const Output stopped = run_and_terminate(command("parts", more), root_ / "log", 20);
    ASSERT_EQ(stopped.code, 0) << stopped.text;
    EXPECT_NE(stopped.text.find("stopped by SIGTERM at step"), std::string::npos)
        << stopped.text;
    EXPECT_EQ(stopped.text.find("final:"), std::string::npos) << stopped.text;
    if (part == 2) {
      EXPECT_NE(stopped.text.find("resumed: step="), std::string::npos) << stopped.text;
    }
  }
  const Output rest = run_command(command("parts", more));
  ASSERT_EQ(rest.code, 0) << rest.text;
  EXPECT_NE(rest.text.find("resumed: step="), std::string::npos) << rest.text;
  EXPECT_NE(rest.text.find("final: step=938 "), std::string::npos) << rest.text;

  const double a = checkpoint_loss(root_ / "whole"), b = checkpoint_loss(root_ / "parts");
  EXPECT_LE(std::abs(a - b), 1e-6 * std::abs(a)) << "uninterrupted " << a << " resumed " << b;
  EXPECT_EQ(max_parameter_difference(root_ / "whole-model" / "model.pt",
                                     root_ / "parts-model" / "model.pt"),
            0.0);
}

// heft train with simulated spot interruptions: Completed after 2 interruptions, with the
// loss and parameters of the same job run without them.
TEST_F(ResumeTest, SpotInterruptedJobEndsLikeAnUninterruptedOne) {
  if (!fs::exists(kBin + "/heft")) GTEST_SKIP() << "no heft binary";
  const fs::path home = root_ / "home";
  std::ofstream(root_ / "spec.yaml")
      << "name: spot\n"
         "entry_point: heft-train\n"
         "hyperparameters: {model: mlp, epochs: 2, batch_size: 64, lr: 0.05, seed: 3, "
         "eval: false, log_every: 100}\n"
         "inputs: {train: " << kData << "}\n"
         "checkpoint: {every_steps: 200, keep: 2}\n"
         "environment: {OMP_NUM_THREADS: \"1\"}\n";
  const std::string heft = "env -u HEFT_STORE HEFT_HOME=" + home.string() + " " + kBin + "/heft ";
  const std::string spec = (root_ / "spec.yaml").string();
  const Output plain = run_command(heft + "train " + spec + " --name plain");
  ASSERT_EQ(plain.code, 0) << plain.text;
  const Output spot = run_command(heft + "train " + spec +
                          " --name spot --set 'spot={enabled: true, simulate: {every_s: 2, "
                          "count: 2}}'");
  ASSERT_EQ(spot.code, 0) << spot.text;
  const Output described = run_command(heft + "describe spot --json");
  ASSERT_EQ(described.code, 0) << described.text;
  const nlohmann::json d = nlohmann::json::parse(described.text, nullptr, false);
  ASSERT_FALSE(d.is_discarded()) << described.text;
  EXPECT_EQ(d.value("status", ""), "Completed") << described.text;
  EXPECT_EQ(d.value("interruptions", -1), 2) << described.text;
  // Restarted from its checkpoints, not from scratch (which would end the same way too).
  const Output logs = run_command(heft + "logs spot --rank 0");
  EXPECT_NE(logs.text.find("resumed: step="), std::string::npos) << logs.text;

  const fs::path jobs = home / "jobs";
  const double a = checkpoint_loss(jobs / "plain" / "checkpoints");
  const double b = checkpoint_loss(jobs / "spot" / "checkpoints");
  EXPECT_LE(std::abs(a - b), 1e-6 * std::abs(a)) << "uninterrupted " << a << " resumed " << b;
}

}  // namespace
