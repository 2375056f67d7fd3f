// ctest-labels: multiproc
// The automatic layout's surfaces through the built binaries (docs/auto-layout.md):
// `heft plan SPEC` prints the ranked table (predicted step time, memory per rank), the dropped
// layouts with their reasons and the chosen layout's line, saying the collective costs are the
// defaults; a spec that fits nowhere exits 2 naming the smallest memory a layout needs; a
// spec that is not heft-train's, or that gives a degree beside auto_layout, exits 2 naming the
// field. `heft plan --model gpt --HYPERPARAMETER V ... -n N` plans heft-train's GPT without a
// spec, alone or with --measure on 2 ranks (a bad hyperparameter or flag is named, exit 2); `heft plan --model FILE.py:FACTORY`
// plans a PyTorch model through heft.torch's auto_layout, alone with the default costs or
// with --measure on 2 ranks that measure them. A job with auto_layout trains on 2 ranks with
// the layout it chose, and `heft describe` shows it with its predicted and measured step time.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "support/command.h"
#include "support/files.h"

namespace {

const std::string kBin = HEFT_BINARY_DIR;

using heft::test::run_command;
using heft::test::TempDir;

// A small GPT's spec on `ranks` ranks of one host with `parameters` in its modelparallel block.
std::string write_spec(const TempDir& dir, int ranks, const std::string& parameters,
                       const std::string& extra = "") {
  const std::string path = dir.path() + "/spec.yaml";
  std::ofstream(path) << "name: plan-gpt\n"
                         "entry_point: heft-train\n"
                         "hyperparameters: {model: gpt, n_layer: 2, n_head: 2, n_embd: 32, block_size: 32, "
                         "batch_size: 8, max_steps: 4, eval: false, log_every: 2" +
                             extra +
                             "}\n"
                             "cluster: {instance_count: 1, processes_per_host: " +
                             std::to_string(ranks) +
                             "}\n"
                             "distribution:\n"
                             "  modelparallel: {enabled: true, parameters: {" +
                             parameters + "}}\n";
  return path;
}

std::string heft(const TempDir& dir, const std::string& args) {
  return "HEFT_HOME=" + dir.path() + "/home OMP_NUM_THREADS=1 " + kBin + "/heft " + args;
}

TEST(HeftPlan, PrintsTheRankedTableAndTheDroppedLayouts) {
  TempDir dir("plan-test");
  const std::string spec = write_spec(dir, 4, "auto_layout: true, memory_limit_gb: 8");
  const heft::test::CommandOutput out = run_command(heft(dir, "plan " + spec));
  ASSERT_EQ(out.code, 0) << out.text;
  EXPECT_NE(out.text.find("plan: 4 ranks (1 hosts x 4)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("collective costs are the defaults"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("memory limit 8.0 GB per rank (memory_limit_gb)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("feasible layouts (fastest first)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("rank  step ms  compute ms"), std::string::npos) << out.text;
  // The top layouts' memory by component, largest first.
  EXPECT_TRUE(std::regex_search(out.text, std::regex(R"(memory/rank by component, largest first:\n  1: [a-z_]+ [0-9.]+ [kMG]?B, [a-z_]+ )")))
      << out.text;
  // Row 1 of the table, and the chosen layout's line with its fields.
  EXPECT_TRUE(std::regex_search(out.text, std::regex(R"(\n   1 +[0-9.]+ +[0-9.]+ .* data \d x sharded \d x tensor \d)")))
      << out.text;
  EXPECT_TRUE(std::regex_search(out.text, std::regex(R"(\nlayout: data=\d sharded=\d tensor=\d pipeline=\d )"
                                                     R"(microbatches=\d+ virtual_stages=\d checkpointing=[01] )"
                                                     R"(predicted_step_s=[0-9.]+ predicted_memory_gb=[0-9.]+ )"
                                                     R"(memory_limit_gb=8.000\n)")))
      << out.text;
  // Layouts the model cannot take, each with its reason: 2 heads cannot be split 4 ways.
  EXPECT_NE(out.text.find("dropped:"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("tensor 4 does not divide heads 2"), std::string::npos) << out.text;
  // Nothing was recorded: plan does not train.
  EXPECT_EQ(run_command(heft(dir, "jobs")).text.find("plan-gpt"), std::string::npos);
}

TEST(HeftPlan, FitsNowhereExits2NamingTheSmallestMemory) {
  TempDir dir("plan-test");
  const std::string spec = write_spec(dir, 4, "auto_layout: true, memory_limit_gb: 0.001");
  const heft::test::CommandOutput out = run_command(heft(dir, "plan " + spec));
  EXPECT_EQ(out.code, 2) << out.text;
  EXPECT_TRUE(std::regex_search(out.text, std::regex(R"(memory_limit: no layout fits 1\.0 MB per rank; the smallest )"
                                                     R"(needs [0-9.]+ [kMG]B \(data \d x sharded)")))
      << out.text;
}

TEST(HeftPlan, BadSpecsNameTheField) {
  TempDir dir("plan-test");
  const heft::test::CommandOutput both =
      run_command(heft(dir, "plan " + write_spec(dir, 4, "auto_layout: true, tensor_parallel_degree: 2")));
  EXPECT_EQ(both.code, 2) << both.text;
  EXPECT_NE(both.text.find("distribution.modelparallel.parameters.auto_layout: true chooses "
                           "distribution.modelparallel.parameters.tensor_parallel_degree itself"),
            std::string::npos)
      << both.text;
  const std::string script = dir.path() + "/script.yaml";
  std::ofstream(script) << "name: s\nentry_point: [python3, train.py]\n";
  const heft::test::CommandOutput other = run_command(heft(dir, "plan " + script));
  EXPECT_EQ(other.code, 2) << other.text;
  EXPECT_NE(other.text.find("entry_point: expected heft-train"), std::string::npos) << other.text;
}

const std::string kGpt = "--model gpt --n_layer 2 --n_head 2 --n_embd 32 --block_size 32 --batch_size 8";

// The chosen layout's line, with the limit given.
const std::regex kLayoutLine(R"(\nlayout: data=\d sharded=\d tensor=\d pipeline=\d microbatches=\d+ )"
                             R"(virtual_stages=\d checkpointing=[01] predicted_step_s=[0-9.]+ )"
                             R"(predicted_memory_gb=[0-9.]+ memory_limit_gb=8.000\n)");

TEST(HeftPlan, ModelByHyperparametersWithoutASpec) {
  TempDir dir("plan-test");
  const heft::test::CommandOutput out = run_command(heft(dir, "plan " + kGpt + " -n 4 --memory_limit_gb 8"));
  ASSERT_EQ(out.code, 0) << out.text;
  EXPECT_NE(out.text.find("plan: 4 ranks (1 host x 4), profiled on this process"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("collective costs are the defaults"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("memory limit 8.0 GB per rank (memory_limit_gb)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("tensor 4 does not divide heads 2"), std::string::npos) << out.text;
  EXPECT_TRUE(std::regex_search(out.text, kLayoutLine)) << out.text;
  const heft::test::CommandOutput none = run_command(heft(dir, "plan " + kGpt + " -n 4 --memory_limit_gb 0.001"));
  EXPECT_EQ(none.code, 2) << none.text;
  EXPECT_TRUE(std::regex_search(none.text, std::regex(R"(memory_limit: no layout fits 1\.0 MB per rank; the smallest )"
                                                      R"(needs [0-9.]+ [kMG]B \(data \d x sharded)")))
      << none.text;
}

TEST(HeftPlan, ModelByHyperparametersMeasuredOnTwoRanks) {
  TempDir dir("plan-test");
  const heft::test::CommandOutput out =
      run_command(heft(dir, "plan " + kGpt + " -n 2 --memory_limit_gb 8 --measure"));
  ASSERT_EQ(out.code, 0) << out.text;
  EXPECT_NE(out.text.find("plan: 2 ranks (1 host x 2), started here to measure the collectives"), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("collective costs measured on 2 ranks"), std::string::npos) << out.text;
  EXPECT_TRUE(std::regex_search(out.text, kLayoutLine)) << out.text;
  EXPECT_EQ(out.text.find("feasible layouts"), out.text.rfind("feasible layouts")) << out.text;  // rank 0 only
}

TEST(HeftPlan, BadFlagsAreNamed) {
  TempDir dir("plan-test");
  const std::string spec = write_spec(dir, 2, "auto_layout: true");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --model gpt --n_layr 2 -n 2", "heft plan: --n_layr: unknown; did you mean 'n_layer'?"},
      {"plan --model gpt --n_layer 0 -n 2", "heft plan: --n_layer: expected"},
      {"plan --model nosuch -n 2", "heft plan: --model: expected one of"},
      {"plan --model gpt -n 0", "-n: Value 0 not in range"},
      {"plan --model gpt -n 2 --memory_limit_gb -1", "--memory_limit_gb: Value -1 not in range"},
      {"plan --model gpt --partitions 2 -n 2", "auto_layout: true chooses"},
      {"plan --model gpt --measure", "heft plan: --measure: needs -n N"},
      {"plan --model gpt --global_batch 8 -n 2", "heft plan: --global_batch: applies to a Python model"},
      {"plan " + spec + " --model gpt", "heft plan: SPEC and --model: give one or the other"},
      {"plan " + spec + " -n 4", "heft plan: -n: applies with --model"},
      {"plan", "heft plan: expected a SPEC or --model"},
      {"plan --model m.py:build --n_layer 2", "heft plan: --n_layer: not an option of heft plan --model FILE.py:FACTORY"},
      {"plan --model " + dir.path() + "/none.py:build", "heft plan: --model " + dir.path() + "/none.py:build: " +
                                                            dir.path() + "/none.py: no such file"},
  };
  for (const auto& [args, message] : cases) {
    const heft::test::CommandOutput out = run_command(heft(dir, args));
    EXPECT_EQ(out.code, 2) << args << "\n" << out.text;
    EXPECT_NE(out.text.find(message), std::string::npos) << args << "\n" << out.text;
  }
}

// A PyTorch model's factory: 4 x (Linear(64, 64), ReLU) on 8 samples; planned() adds a tensor
// plan (the first two Linears split).
std::string write_factory(const TempDir& dir) {
  const std::string path = dir.path() + "/mlp.py";
  std::ofstream(path) << "import torch\n"
                         "def build():\n"
                         "    layers = []\n"
                         "    for _ in range(4):\n"
                         "        layers += [torch.nn.Linear(64, 64), torch.nn.ReLU()]\n"
                         "    return torch.nn.Sequential(*layers), torch.randn(8, 64)\n"
                         "def planned():\n"
                         "    model, x = build()\n"
                         "    return model, x, {'0': 'colwise', '2': 'rowwise'}\n"
                         "def broken():\n"
                         "    return 3\n";
  return path;
}

TEST(HeftPlan, PythonModelAloneWithTheDefaultCosts) {
  TempDir dir("plan-test");
  const std::string factory = write_factory(dir);
  const heft::test::CommandOutput out =
      run_command(heft(dir, "plan --model " + factory + ":build -n 2 --memory_limit_gb 8"));
  ASSERT_EQ(out.code, 0) << out.text;
  EXPECT_NE(out.text.find("plan: 2 ranks (1 host x 2), profiled on this process"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("auto_layout: 8 layers profiled on one rank at 8 samples"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("collective costs are the defaults"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("memory limit 8.0 GB per rank (--memory_limit_gb)"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("feasible layouts (fastest first)"), std::string::npos) << out.text;
  EXPECT_TRUE(std::regex_search(out.text, kLayoutLine)) << out.text;
  // Without a tensor plan the tensor degree is 1; with the factory's plan, 2 is priced.
  EXPECT_NE(out.text.find("tensor 2 x pipeline 1, m 1, v 1, ckpt off: tensor 2: the model has no tensor plan"),
            std::string::npos)
      << out.text;
  const heft::test::CommandOutput planned =
      run_command(heft(dir, "plan --model " + factory + ":planned -n 2 --memory_limit_gb 8"));
  ASSERT_EQ(planned.code, 0) << planned.text;
  EXPECT_EQ(planned.text.find("the model has no tensor plan"), std::string::npos) << planned.text;
  std::smatch with, without;  // the planned model's feasible layouts add those with tensor 2
  ASSERT_TRUE(std::regex_search(planned.text, with, std::regex("(\\d+) feasible layouts"))) << planned.text;
  ASSERT_TRUE(std::regex_search(out.text, without, std::regex("(\\d+) feasible layouts"))) << out.text;
  EXPECT_GT(std::stoi(with[1]), std::stoi(without[1]));
  const heft::test::CommandOutput none =
      run_command(heft(dir, "plan --model " + factory + ":build -n 2 --memory_limit_gb 0.001"));
  EXPECT_EQ(none.code, 2) << none.text;
  EXPECT_NE(none.text.find("heft plan: memory_limit: no layout fits 1.0 MB per rank; the smallest needs"),
            std::string::npos)
      << none.text;
  const heft::test::CommandOutput broken = run_command(heft(dir, "plan --model " + factory + ":broken -n 2"));
  EXPECT_EQ(broken.code, 2) << broken.text;
  EXPECT_NE(broken.text.find(":broken: the factory returned int, expected a tuple (model_or_layers, example_batch[, tensor_plan])"),
            std::string::npos)
      << broken.text;
}

TEST(HeftPlan, PythonModelMeasuredOnTwoRanks) {
  TempDir dir("plan-test");
  const heft::test::CommandOutput out =
      run_command(heft(dir, "plan --model " + write_factory(dir) + ":build -n 2 --memory_limit_gb 8 --measure"));
  ASSERT_EQ(out.code, 0) << out.text;
  EXPECT_NE(out.text.find("plan: 2 ranks (1 host x 2), started here to measure the collectives"), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("collective costs measured on 2 ranks"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("collective costs are the defaults"), std::string::npos) << out.text;
  // Rank 0 alone prints: one table, one layout line.
  EXPECT_TRUE(std::regex_search(out.text, kLayoutLine)) << out.text;
  EXPECT_EQ(out.text.find("feasible layouts"), out.text.rfind("feasible layouts")) << out.text;
}

TEST(HeftPlan, AnAutoLayoutJobTrainsAndDescribeShowsItsLayout) {
  TempDir dir("plan-test");
  const std::string spec = write_spec(dir, 2, "auto_layout: true, memory_limit_gb: 8");
  const heft::test::CommandOutput train = run_command(heft(dir, "train " + spec));
  ASSERT_EQ(train.code, 0) << train.text;
  const heft::test::CommandOutput log = run_command(heft(dir, "logs plan-gpt --rank 0"));
  EXPECT_NE(log.text.find("collective costs measured on 2 ranks"), std::string::npos) << log.text;
  EXPECT_TRUE(std::regex_search(log.text, std::regex(R"(layout: data=\d .* measured_step_s=[0-9.]+ peak_rss_gb=)")))
      << log.text;
  const heft::test::CommandOutput d = run_command(heft(dir, "describe plan-gpt"));
  ASSERT_EQ(d.code, 0) << d.text;
  EXPECT_TRUE(std::regex_search(d.text, std::regex(R"(Layout: data \d x sharded \d x tensor \d x pipeline \d, )"
                                                   R"(microbatches \d+, virtual stages \d, checkpointing o(n|ff); )"
                                                   R"(predicted [0-9.]+ s/step, measured [0-9.]+ s/step)")))
      << d.text;
}

}  // namespace
