// ctest-labels: multiproc
// heft-train end to end on the installed Fashion-MNIST: alone and as 2 ranks under
// `heft run`, the metric lines' format, the same global-batch losses either way, and the
// saved model.
#include <gtest/gtest.h>

#include "support/command.h"
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace {

namespace fs = std::filesystem;

const std::string kBin = HEFT_BINARY_DIR;
const std::string kData = "/usr/share/datasets/fashion-mnist";

using Output = heft::test::CommandOutput;
using heft::test::run_command;

std::string joined(const Output& o) {
  std::ostringstream os;
  for (const auto& l : o.lines) os << l << "\n";
  return os.str();
}

// (step, loss) of every step= line, in order.
std::vector<std::pair<int, double>> losses(const Output& o) {
  std::vector<std::pair<int, double>> v;
  const std::regex step(
      R"((?:\[rank 0\] )?step=(\d+) epoch=(\d+) loss=([0-9.]+) lr=\S+ samples_per_s=[0-9.]+)");
  for (const auto& l : o.lines) {
    std::smatch m;
    if (std::regex_match(l, m, step)) v.emplace_back(std::stoi(m[1].str()), std::stod(m[3].str()));
  }
  return v;
}

TEST(HeftTrainRun, TwoRanksUnderHeftRunMatchOneProcessAndPrintTheMetricLines) {
  if (!fs::exists(kData + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string args =
      " --model mlp --limit 640 --batch_size 64 --log_every 2 --lr 0.05 --warmup_steps 3 "
      "--seed 4 --data " +
      kData;
  const fs::path model_dir =
      fs::temp_directory_path() / ("heft-train-test-" + std::to_string(getpid()));
  const Output alone =
      run_command("env -u HEFT_STORE OMP_NUM_THREADS=1 " + kBin + "/heft-train" + args + " --eval false");
  ASSERT_EQ(alone.code, 0) << joined(alone);
  const Output two = run_command(kBin + "/heft run --hosts 2 -n 1 -- " + kBin + "/heft-train" + args +
                         " --model_dir " + model_dir.string());
  ASSERT_EQ(two.code, 0) << joined(two);

  // Only rank 0 prints; every line is one of the three documented forms.
  const std::regex any(
      R"(\[rank 0\] (step=\d+ epoch=\d+ loss=[0-9.]+ lr=[0-9.e-]+ samples_per_s=[0-9.]+|)"
      R"(epoch=\d+ test_loss=[0-9.]+ test_acc=[0-9.]+|)"
      R"(final: step=\d+ loss=[0-9.]+ test_acc=[0-9.]+ samples_per_s=[0-9.]+ seconds=[0-9.]+))");
  for (const auto& l : two.lines) EXPECT_TRUE(std::regex_match(l, any)) << "unexpected line: " << l;
  EXPECT_EQ(two.lines.size(), 5u + 1 + 1) << joined(two);  // 5 step lines, 1 epoch, final
  EXPECT_EQ(two.lines.back().rfind("[rank 0] final: step=10 loss=", 0), 0u) << joined(two);
  EXPECT_NE(alone.lines.back().find("test_acc=nan"), std::string::npos) << joined(alone);

  // The global-batch loss does not depend on how many ranks share the batch.
  // Printed with 4 decimals; the two differ only by summation order (~1e-7).
  constexpr double kTolerance = 2e-4;
  const auto l1 = losses(alone), l2 = losses(two);
  ASSERT_EQ(l1.size(), 5u) << joined(alone);
  ASSERT_EQ(l2.size(), 5u) << joined(two);
  double worst = 0;
  for (size_t i = 0; i < l1.size(); ++i) {
    EXPECT_EQ(l1[i].first, l2[i].first);
    worst = std::max(worst, std::abs(l1[i].second - l2[i].second));
  }
  EXPECT_LE(worst, kTolerance) << "largest loss difference " << worst << "\n"
                               << joined(alone) << joined(two);
  EXPECT_TRUE(fs::exists(model_dir / "model.pt"));
  fs::remove_all(model_dir);
}

// Every model-parallel strategy reports its waits for collectives as the step's communication
// phase (any wait on a ProcessGroup's Work), for every rank: the profiler's LoadBalancing
// rule takes it out of a rank's busy time.
TEST(HeftTrainRun, EveryStrategyReportsItsCommunicationPhase) {
  const std::string text = "/usr/share/games/fortunes";
  if (!fs::exists(text)) GTEST_SKIP() << "no fortunes text (setup.sh installs fortunes)";
  const fs::path home = fs::temp_directory_path() / ("heft-train-phase-" + std::to_string(getpid()));
  fs::create_directories(home);
  const std::map<std::string, std::string> strategies = {
      {"sharded", "sharded_data_parallel_degree: 2"},
      {"tensor", "tensor_parallel_degree: 2"},
      {"pipeline", "partitions: 2, microbatches: 2"}};
  for (const auto& [name, parameters] : strategies) {
    const std::string spec = (home / (name + ".yaml")).string();
    std::ofstream(spec) << "name: " << name << "\nentry_point: heft-train\n"
                        << "hyperparameters: {model: gpt, max_steps: 6, batch_size: 4, log_every: 1,"
                           " generate: 0, n_layer: 2, n_embd: 32, n_head: 2}\n"
                        << "inputs: {train: " << text << "}\n"
                        << "cluster: {processes_per_host: 2}\n"
                        << "distribution: {modelparallel: {enabled: true, parameters: {" << parameters
                        << "}}}\n";
    const std::string env = "HEFT_HOME=" + (home / "home").string() + " ";
    const Output run = run_command(env + kBin + "/heft train " + spec + " 2>&1");
    ASSERT_EQ(run.code, 0) << name << ":\n" << joined(run);
    const Output m = run_command(env + kBin + "/heft metrics " + name +
                                 " --name step:communication_ms --format json");
    ASSERT_EQ(m.code, 0) << joined(m);
    std::map<int, double> by_rank;
    for (const auto& p : nlohmann::json::parse(joined(m))) by_rank[p["rank"].get<int>()] += p["value"].get<double>();
    ASSERT_EQ(by_rank.size(), 2u) << name << ": " << joined(m);
    for (const auto& [rank, ms] : by_rank)
      EXPECT_GT(ms, 0.0) << name << ": rank " << rank << " reported no communication";
  }
  fs::remove_all(home);
}

// Every bad input is exit 2 with the variable named, OMP_NUM_THREADS included.
TEST(HeftTrainRun, ABadOmpNumThreadsIsBadInput) {
  const Output o = run_command("env -u HEFT_STORE OMP_NUM_THREADS=many " + kBin + "/heft-train --limit 64");
  EXPECT_EQ(o.code, 2) << joined(o);
  EXPECT_NE(joined(o).find("OMP_NUM_THREADS: expected a positive integer, found 'many'"),
            std::string::npos) << joined(o);
}

}  // namespace
