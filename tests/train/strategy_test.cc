// ctest-labels: multiproc
// The trainer's parts through their interfaces (task.h, models.h, strategy.h): the
// data_parallel strategy with the image task on 2 and 3 forked ranks gives, at every step,
// the loss of one process on the same global batches (also a one-rank mesh, so the test
// goes through the same code), the same parameters after the last step, the same test-set
// evaluation, exactly one reporting rank, and a state that round-trips. The registry names
// its models and tasks and refuses an unknown one by listing them. The pipeline's profile:
// two fresh profiles of examples/gpt-pipeline.yaml's GPT choose the same, balanced split; a
// pipelined heft-train job on 2 ranks reports every step phase on every rank and prints the
// same split in two runs. bf16 under data parallel, tensor parallel (2 ranks) and a 2-stage
// pipeline, none sharded: 10 steps of a small GPT give at every step the float32 loss of one
// process within 1% (relative), differ from it by more than float32 noise (the bfloat16 path
// ran), and keep float32 parameters and float32 gradients; the spec's bf16 is not refused.
#include "heft/train/strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "heft/comm/store/memory_store.h"
#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/train/fashion_mnist.h"
#include "heft/train/gpt.h"
#include "heft/train/pipeline_strategy.h"
#include "heft/train/text.h"
#include "support/command.h"
#include "support/ranks.h"
#include "train/gpt_stack.h"

namespace heft::train {
namespace {

using test::expect;
using train_test::corpus_installed;
using train_test::GptStack;
using train_test::resolved;
using train_test::small_gpt;

constexpr double kTolerance = 2e-5;

bool dataset_installed() {
  return std::filesystem::exists(std::string(kDefaultFashionMnistDir) +
                                 "/train-labels-idx1-ubyte.gz");
}

Hyperparameters small_run() {
  Hyperparameters hp;
  hp.model = "mlp";
  hp.data = kDefaultFashionMnistDir;
  hp.batch_size = 40;  // 3 ranks: shares 14, 13, 13
  hp.limit = 200;      // 5 steps
  hp.lr = 0.05;
  hp.seed = 3;
  return hp;
}

// One process's run of the whole stack: mesh, task, model, strategy.
struct Stack {
  Stack(comm::Communicator& world, const Hyperparameters& hp)
      : mesh(world, mesh_shape(resolved(hp), world.size())),
        task(make_task(find_model(hp.model).task, hp, kDefaultFashionMnistDir,
                       mesh.coordinate(parallel::Dim::kData), mesh.size(parallel::Dim::kData))) {
    torch::manual_seed(static_cast<uint64_t>(hp.seed));
    ModelContext context;
    context.hp = hp;
    context.mesh = &mesh;
    OptimizerConfig o;
    o.lr = hp.lr;
    strategy = make_strategy(resolved(hp), hp, mesh, make_model(hp.model, context), o);
  }
  // The global mean loss of one step at a constant rate.
  double step(int64_t i, double lr) {
    const Batch b = task->batch(i);
    const torch::Tensor sum = strategy->step(b, *task, lr);
    return strategy->loss_total(sum) / static_cast<double>(b.global_count);
  }
  parallel::DeviceMesh mesh;
  std::unique_ptr<Task> task;
  std::unique_ptr<Strategy> strategy;
};

void check_against_one_process(comm::Communicator& world) {
  torch::set_num_threads(1);
  const Hyperparameters hp = small_run();
  comm::CommunicatorOptions alone_options;
  alone_options.token = "alone";
  auto alone_comm = comm::Communicator::create(std::make_shared<comm::MemoryStore>(), "alone",
                                               0, 1, alone_options);
  Stack alone(*alone_comm, hp);
  Stack ranks(world, hp);
  expect(ranks.strategy->reports() == (world.rank() == 0), "only rank 0 reports");
  expect(!ranks.strategy->single_writer(), "every rank writes its part of a checkpoint");
  expect(ranks.task->steps_per_epoch() == 5 && alone.task->steps_per_epoch() == 5,
         "5 steps per epoch");
  alone.task->set_epoch(0);
  ranks.task->set_epoch(0);
  for (int64_t i = 0; i < 5; ++i) {
    const double a = alone.step(i, hp.lr), r = ranks.step(i, hp.lr);
    expect(std::abs(a - r) <= kTolerance, "step " + std::to_string(i) + ": loss " +
                                              std::to_string(r) + " on " +
                                              std::to_string(world.size()) + " ranks, " +
                                              std::to_string(a) + " on one");
  }
  auto pa = alone.strategy->model().parameters(), pr = ranks.strategy->model().parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    expect((pa[i] - pr[i]).abs().max().item<double>() <= kTolerance, "parameters differ");

  Hyperparameters eval_hp = hp;
  eval_hp.eval = true;
  const auto held_out = [&](Stack& s, int rank, int size) {
    auto task = make_task("image", eval_hp, kDefaultFashionMnistDir, rank, size);
    return task->evaluate([&](const torch::Tensor& x) { return s.strategy->evaluate(x); },
                          s.strategy->data_group());
  };
  const Metrics ea = held_out(alone, 0, 1);
  const Metrics er = held_out(ranks, world.rank(), world.size());
  expect(ea.size() == 2 && ea[0].first == "test_loss" && ea[1].first == "test_acc",
         "evaluation names test_loss, test_acc");
  for (size_t i = 0; i < ea.size(); ++i)
    expect(std::abs(ea[i].second - er[i].second) <= 1e-4,
           ea[i].first + ": " + std::to_string(er[i].second) + " vs " +
               std::to_string(ea[i].second));

  // The state round-trips (rank 0's part holds the replica): load it into the one-process
  // stack and the parameters agree.
  const auto state = ranks.strategy->state();
  expect(state.count("unit-00000.pt") && state.count("layout.json"), "state files");
  Stack fresh(*alone_comm, hp);
  if (world.rank() == 0) {
    fresh.strategy->load_state({state}, "test");
    auto pf = fresh.strategy->model().parameters();
    for (size_t i = 0; i < pf.size(); ++i)
      expect(torch::equal(pf[i], pr[i]), "loaded parameters equal the saved ones");
  }
  // A single-writer checkpoint of an earlier heft without its optimizer.pt.
  bool threw = false;
  try {
    fresh.strategy->load_state({{{"model.pt", parallel::module_to_bytes(fresh.strategy->model())}}},
                               "step 7 in /x");
  } catch (const IoError& e) {
    threw = std::string(e.what()) == "checkpoint step 7 in /x has no optimizer.pt";
  }
  expect(threw, "a missing optimizer.pt is an IoError naming it");
}

TEST(DataParallelStrategy, EqualsOneProcessOnTwoAndThreeRanks) {
  if (!dataset_installed()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  for (int n : {2, 3}) {
    test::StoreProcess store;
    auto result = test::run_world(n, store, check_against_one_process);
    EXPECT_TRUE(result.all_ok()) << n << " ranks:\n" << result.summary();
  }
}

TEST(ModelRegistry, NamesModelsWithTheirTasksAndRefusesUnknownOnes) {
  EXPECT_EQ(model_names(), (std::vector<std::string>{"mlp", "cnn", "gpt"}));
  EXPECT_EQ(find_model("mlp").task, "image");
  EXPECT_EQ(find_model("cnn").task, "image");
  EXPECT_EQ(find_model("gpt").task, "text");
  EXPECT_TRUE(find_model("gpt").decay_matrices_only);
  try {
    find_model("resnet");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "unknown model 'resnet': expected one of mlp, cnn, gpt");
  }
  EXPECT_THROW(make_task("speech", {}, "", 0, 1), InvalidArgument);
}

// examples/gpt-pipeline.yaml's GPT (GptConfig's defaults: embedding, 4 blocks, head) on its
// micro-batch (batch 16 over data 2 and 8 micro-batches: 1 sample) in its 2 stages,
// profiled twice from fresh models: the same split (issue 35: one run of the example put
// the embedding through block 2 on stage 0, a re-run chose the balanced split).
TEST(PipelineProfile, TwoFreshProfilesOfTheExampleGptChooseTheSameSplit) {
  torch::set_num_threads(1);
  const auto fresh_split = [] {
    torch::manual_seed(1);
    Gpt model(GptConfig{});
    const std::vector<parallel::pipeline::LayerCost> costs = profile_pipeline_layers(model, 1);
    EXPECT_EQ(costs.size(), 6u);
    for (const auto& c : costs)
      EXPECT_TRUE(c.forward_s > 0 && c.backward_s > 0) << c.name << " was not timed";
    EXPECT_EQ(costs.front().param_bytes, (256 + 128) * 128 * 4);  // token and position tables
    EXPECT_EQ(costs.front().activation_bytes, 1 * 128 * 128 * 4);  // (B, T, C) floats
    const parallel::pipeline::Plan plan =
        parallel::pipeline::auto_partition(costs, 2, 0.2, kPartitionTolerance);
    return std::make_pair(plan.first, parallel::pipeline::describe(plan, costs));
  };
  const auto [first, table] = fresh_split();
  const auto [again, table_again] = fresh_split();
  EXPECT_EQ(first, again) << table << "then\n" << table_again;
  EXPECT_EQ(first, (std::vector<int>{0, 3})) << table;  // embedding .. block.1 | block.2 .. head
}

// The profile draws its sample from the global generator and puts its state back: ranks that
// profile and ranks that do not keep the same random stream.
TEST(PipelineProfile, LeavesTheRandomStreamAndTheGradientsAsTheyWere) {
  torch::manual_seed(7);
  Gpt model(GptConfig{2, 2, 32, 16, 64});
  torch::manual_seed(5);
  parallel::pipeline::ProfileOptions quick;
  quick.warmup = 0;
  quick.repeats = 1;
  profile_pipeline_layers(model, 2, quick);
  const torch::Tensor after_profile = torch::rand({4});
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(after_profile, torch::rand({4})));
  for (const torch::Tensor& p : model.parameters()) EXPECT_FALSE(p.grad().defined());
}

// A pipelined job (2 stages on 2 ranks) under `heft train`, twice: every rank reports the
// forward, backward, communication and optimizer phases of its steps (they were 0 ms every
// step), and both runs print the same split and the predicted-against-measured table.
TEST(PipelineStrategy, ReportsEveryStepPhaseAndPrintsTheSameSplitTwice) {
  const std::string text = "/usr/share/games/fortunes";
  if (!std::filesystem::exists(text)) GTEST_SKIP() << "no fortunes text (setup.sh installs fortunes)";
  namespace fs = std::filesystem;
  const std::string bin = HEFT_BINARY_DIR;
  const fs::path home = fs::temp_directory_path() / ("heft-pipeline-phase-" + std::to_string(getpid()));
  fs::create_directories(home);
  const std::string env = "HEFT_HOME=" + (home / "home").string() + " ";
  std::vector<std::string> splits;
  for (const std::string name : {"pipeline-a", "pipeline-b"}) {
    const std::string spec = (home / (name + ".yaml")).string();
    std::ofstream(spec) << "name: " << name << "\nentry_point: heft-train\n"
                        << "hyperparameters: {model: gpt, max_steps: 6, batch_size: 8, log_every: 1,"
                           " generate: 0, n_layer: 2, n_embd: 32, n_head: 2}\n"
                        << "inputs: {train: " << text << "}\n"
                        << "cluster: {processes_per_host: 2}\n"
                        << "distribution: {modelparallel: {enabled: true, parameters: "
                           "{partitions: 2, microbatches: 2}}}\n";
    const test::CommandOutput run = test::run_command(env + bin + "/heft train " + spec + " 2>&1");
    ASSERT_EQ(run.code, 0) << name << ":\n" << run.text;
    std::string split;
    for (const std::string& line : run.lines)
      if (line.find("this stage: layers") != std::string::npos) split = line.substr(line.find("this stage"));
    EXPECT_FALSE(split.empty()) << run.text;
    splits.push_back(split);
    EXPECT_NE(run.text.find("predicted_ms  measured_ms"), std::string::npos) << run.text;
    for (const char* phase : {"forward", "backward", "communication", "optimizer"}) {
      const test::CommandOutput m = test::run_command(env + bin + "/heft metrics " + name +
                                                      " --name step:" + phase + "_ms --format json");
      ASSERT_EQ(m.code, 0) << m.text;
      std::map<int, double> by_rank;
      for (const auto& p : nlohmann::json::parse(m.text)) by_rank[p["rank"].get<int>()] += p["value"].get<double>();
      ASSERT_EQ(by_rank.size(), 2u) << phase << ": " << m.text;
      for (const auto& [rank, ms] : by_rank) EXPECT_GT(ms, 0.0) << phase << ": rank " << rank;
    }
  }
  EXPECT_EQ(splits[0], splits[1]);
  fs::remove_all(home);
}

struct Bf16Case {
  const char* name;
  int64_t tp = 1, pp = 1;
};

constexpr double kBf16Relative = 1e-2;

void check_bf16(comm::Communicator& world, const Bf16Case& c) {
  torch::set_num_threads(1);
  const Hyperparameters reference_hp = small_gpt();
  Hyperparameters hp = reference_hp;
  hp.bf16 = true;
  hp.tensor_parallel_degree = c.tp;
  hp.partitions = c.pp;
  hp.microbatches = c.pp > 1 ? 2 : 1;
  comm::CommunicatorOptions alone_options;
  alone_options.token = "alone";
  auto alone_comm = comm::Communicator::create(std::make_shared<comm::MemoryStore>(), "alone", 0,
                                               1, alone_options);
  GptStack alone(*alone_comm, reference_hp);
  GptStack ranks(world, hp);
  const std::string kind = ranks.strategy->describe();
  expect(kind.rfind(c.pp > 1 ? "pipeline" : "data_parallel", 0) == 0, "strategy: " + kind);
  double worst = 0;
  for (int64_t i = 0; i < 10; ++i) {
    const double a = alone.step(i), r = ranks.step(i);
    const double rel = std::abs(a - r) / std::abs(a);
    worst = std::max(worst, rel);
    expect(rel <= kBf16Relative, std::string(c.name) + " step " + std::to_string(i) + ": bf16 loss " +
                                     std::to_string(r) + " vs float32 " + std::to_string(a));
  }
  // The same layouts in float32 agree with one process to below 1e-6 (measured); bfloat16
  // matmuls move the loss by about 1e-4.
  expect(worst > 1e-5, std::string(c.name) + ": the loss moved only " + std::to_string(worst) +
                           " from float32; bfloat16 did not run");
  for (const auto& item : ranks.strategy->model().named_parameters()) {
    expect(item.value().scalar_type() == torch::kFloat, item.key() + " is not float32");
    const torch::Tensor& g = item.value().grad();
    expect(!g.defined() || g.scalar_type() == torch::kFloat, item.key() + "'s gradient is not float32");
  }
  if (world.rank() == 0)
    std::cerr << c.name << ": worst relative loss difference from float32 over 10 steps " << worst << "\n";
}

TEST(Bf16Strategy, DataTensorAndPipelineStayNearFloat32WithFloat32Parameters) {
  if (!corpus_installed()) GTEST_SKIP() << "no fortunes text (setup.sh installs fortunes)";
  for (const Bf16Case& c : {Bf16Case{"data parallel", 1, 1}, Bf16Case{"tensor 2", 2, 1},
                            Bf16Case{"pipeline 2 stages", 1, 2}}) {
    test::StoreProcess store;
    auto result = test::run_world(2, store, [&](comm::Communicator& w) { check_bf16(w, c); });
    EXPECT_TRUE(result.all_ok()) << c.name << ":\n" << result.summary();
  }
}

// bf16 without sharding, with activation checkpointing too: the recomputation in backward
// computes in bfloat16 as the forward did, so the losses equal bf16's without it (float32
// recomputation would give other gradients from the first step).
TEST(Bf16Strategy, ActivationCheckpointingRecomputesInBf16) {
  if (!corpus_installed()) GTEST_SKIP() << "no fortunes text (setup.sh installs fortunes)";
  torch::set_num_threads(1);
  comm::CommunicatorOptions options;
  options.token = "alone";
  auto comm = comm::Communicator::create(std::make_shared<comm::MemoryStore>(), "alone", 0, 1, options);
  Hyperparameters hp = small_gpt();
  hp.bf16 = true;
  GptStack plain(*comm, hp);
  EXPECT_NE(plain.strategy->describe().find(", bf16"), std::string::npos) << plain.strategy->describe();
  hp.activation_checkpointing = true;
  GptStack recomputed(*comm, hp);
  Hyperparameters fp32 = small_gpt();
  fp32.activation_checkpointing = true;
  GptStack reference(*comm, fp32);
  double worst_fp32 = 0;
  for (int64_t i = 0; i < 6; ++i) {
    const double a = plain.step(i), r = recomputed.step(i), f = reference.step(i);
    EXPECT_NEAR(r, a, 1e-6 * std::abs(a)) << "step " << i;
    worst_fp32 = std::max(worst_fp32, std::abs(r - f) / std::abs(f));
  }
  EXPECT_GT(worst_fp32, 1e-5) << "bf16 with recomputation moved the loss only " << worst_fp32
                              << " from float32: bfloat16 did not run";
}

}  // namespace
}  // namespace heft::train
