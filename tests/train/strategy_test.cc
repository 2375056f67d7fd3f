// ctest-labels: multiproc
// The trainer's parts through their interfaces (task.h, models.h, strategy.h): the
// data_parallel strategy with the image task on 2 and 3 forked ranks gives, at every step,
// the loss of one process on the same global batches (also a one-rank mesh, so the test
// goes through the same code), the same parameters after the last step, the same test-set
// evaluation, exactly one reporting rank, and a state that round-trips. The registry names
// its models and tasks and refuses an unknown one by listing them.
#include "heft/train/strategy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <iostream>

#include "heft/comm/store/memory_store.h"
#include "heft/error.h"
#include "heft/parallel/checkpoint.h"
#include "heft/train/fashion_mnist.h"
#include "support/ranks.h"

namespace heft::train {
namespace {

using test::expect;

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
      : mesh(world, mesh_shape({}, hp, world.size())),
        task(make_task(find_model(hp.model).task, hp, kDefaultFashionMnistDir,
                       mesh.coordinate(parallel::Dim::kData), mesh.size(parallel::Dim::kData))) {
    torch::manual_seed(static_cast<uint64_t>(hp.seed));
    ModelContext context;
    context.hp = hp;
    context.mesh = &mesh;
    OptimizerConfig o;
    o.lr = hp.lr;
    strategy = make_strategy({}, hp, mesh, make_model(hp.model, context), o);
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
  expect(state.count("shard.pt") && state.count("layout.json"), "state files");
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

}  // namespace
}  // namespace heft::train
