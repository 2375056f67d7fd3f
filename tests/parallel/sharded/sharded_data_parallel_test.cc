// ctest-labels: multiproc
// ShardedDataParallel on its own: the paths it claims run (counters): ZeRO-3 gathers every
// unit twice per step (forward and backward) with prefetches, holding at most the root and
// two units at once; ZeRO-2 gathers once and keeps them; hybrid adds one replicate
// allreduce per flat parameter; no_sync communicates no gradients. Parameters are freed
// between steps. Bad units are refused naming what is wrong, and a rank that dies during a
// sharded step makes the other fail with heft::PeerLost instead of hanging.
// FlatEngine, the data path under it and under heft.torch.parallel's ShardedDataParallel:
// rank 0's values, gathers, averaged reduce-scatters added to the shards' grads, the replicas'
// average, the in-flight cap, full values of a part, the global gradient norm, one rank
// without a group, and the refusals.
#include "heft/parallel/sharded/sharded_data_parallel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>

#include "heft/error.h"
#include "heft/parallel/sharded/flat_engine.h"
#include "support/ranks.h"

namespace heft::parallel::sharded {
namespace {

using test::expect;

struct Block : torch::nn::Module {
  explicit Block(int64_t d) { fc = register_module("fc", torch::nn::Linear(d, d)); }
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc{nullptr};
};

// An input layer (root), three blocks (units), an output layer (root).
struct Net : torch::nn::Module {
  Net() {
    in = register_module("in", torch::nn::Linear(4, 8));
    for (int i = 0; i < 3; ++i) blocks.push_back(register_module("b" + std::to_string(i), std::make_shared<Block>(8)));
    out = register_module("out", torch::nn::Linear(8, 2));
  }
  torch::Tensor forward(torch::Tensor x, ShardedDataParallel& s) {
    x = in(x);
    for (size_t i = 0; i < blocks.size(); ++i) {
      Block* b = blocks[i].get();
      x = s.run_unit(i, x, [b](const torch::Tensor& v) { return b->forward(v); });
    }
    return out(x);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> units() { return {blocks.begin(), blocks.end()}; }
  torch::nn::Linear in{nullptr}, out{nullptr};
  std::vector<std::shared_ptr<Block>> blocks;
};

void one_step(Net& net, ShardedDataParallel& s) {
  s.begin_forward();
  net.forward(torch::randn({6, 4}), s).square().sum().backward();
}

TEST(ShardedDataParallel, CountersShowZero3Zero2HybridAndNoSync) {
  test::StoreProcess store;
  auto result = test::run_world(4, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    ProcessGroup world(c);
    auto shard_comm = c.split(c.rank() / 2, c.rank() % 2);
    auto replicate_comm = c.split(c.rank() % 2, c.rank() / 2);
    ProcessGroup shard(*shard_comm), replicate(*replicate_comm);
    torch::manual_seed(1);
    for (bool zero3 : {true, false}) {
      auto net = std::make_shared<Net>();
      ShardedOptions o;
      o.reshard_after_forward = zero3;
      ShardedDataParallel s(net, net->units(), shard, &replicate, o);
      // 4 units (3 blocks + root) with one flat each.
      expect(s.flats().size() == 4, "4 flat parameters");
      one_step(*net, s);
      const ShardedCounters& k = s.counters();
      const std::string what = std::string(zero3 ? "ZeRO-3" : "ZeRO-2") + ": allgathers " +
                               std::to_string(k.allgathers) + ", prefetched " +
                               std::to_string(k.prefetched) + ", max gathered " +
                               std::to_string(k.max_gathered) + ", reduce-scatters " +
                               std::to_string(k.reduce_scatters) + ", replicate allreduces " +
                               std::to_string(k.replicate_allreduces);
      if (c.rank() == 0) std::cerr << what << "\n";
      expect(k.allgathers == (zero3 ? 7 : 4), what);  // root + 3 forward (+ 3 backward)
      expect(k.prefetched == (zero3 ? 4 : 2), what);  // 2 in forward (+ 2 in backward)
      expect(k.max_gathered <= 3 || !zero3, what);    // root + current + prefetched
      expect(k.reduce_scatters == 4 && k.replicate_allreduces == 4, what);
      for (const auto& p : net->parameters())
        expect(p.storage().nbytes() == 0, "a full parameter is still allocated after the step");
      for (const auto& t : s.shards()) expect(t.grad().defined(), "every shard has its gradient");
      s.reset_counters();
      {
        auto guard = s.no_sync();
        one_step(*net, s);
      }
      expect(s.counters().reduce_scatters == 0 && s.counters().replicate_allreduces == 0,
             "no_sync communicated gradients");
    }
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

TEST(ShardedDataParallel, RefusesUnitsThatAreNotDisjointSubModules) {
  test::StoreProcess store;
  auto result = test::run_world(1, store, [](comm::Communicator& c) {
    ProcessGroup g(c);
    auto net = std::make_shared<Net>();
    auto message = [&](std::vector<std::shared_ptr<torch::nn::Module>> units) {
      try {
        ShardedDataParallel s(net, units, g, nullptr);
      } catch (const InvalidArgument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    const std::string twice = message({net->blocks[0], net->blocks[0]});
    expect(twice == "ShardedDataParallel: units 0 and 1 share a parameter; units must be disjoint", twice);
    const std::string foreign = message({std::make_shared<Block>(8)});
    expect(foreign.find("unit 0 has parameters that are not the module's") != std::string::npos, foreign);
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

TEST(ShardedDataParallel, ARankKilledDuringAStepMakesTheOtherRaisePeerLost) {
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.timeout = std::chrono::seconds(10);
  auto result = test::run_world(
      2, store,
      [](comm::Communicator& c) {
        torch::set_num_threads(1);
        ProcessGroup g(c);
        torch::manual_seed(1);
        auto net = std::make_shared<Net>();
        ShardedDataParallel s(net, net->units(), g, nullptr);
        one_step(*net, s);
        if (c.rank() == 1) ::kill(::getpid(), SIGKILL);  // dies between steps
        try {
          one_step(*net, s);
        } catch (const PeerLost&) {
          return;
        }
        throw Error("the survivor's step did not raise PeerLost");
      },
      options, std::chrono::seconds(60));
  ASSERT_EQ(result.ranks.size(), 2u);
  EXPECT_EQ(result.ranks[0].exit_code, 0) << result.summary();
  EXPECT_EQ(result.ranks[1].signal, SIGKILL) << result.summary();
  EXPECT_FALSE(result.timed_out);
}

// 4 ranks as 2 shards x 2 replicas; two flats of 5 and 3 elements (padded to 6 and 4), one
// unit each. Values are rank-dependent so that "rank 0's values" and every average show.
TEST(FlatEngine, GathersReducesAveragesAndCapsOnFourRanksAsTwoByTwo) {
  test::StoreProcess store;
  auto result = test::run_world(4, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    auto shard_comm = c.split(c.rank() / 2, c.rank() % 2);
    auto replicate_comm = c.split(c.rank() % 2, c.rank() / 2);
    ProcessGroup shard(*shard_comm), replicate(*replicate_comm);
    EngineOptions o;
    o.max_reductions_in_flight = 1;
    FlatEngine e(&shard, &replicate, o);
    const int k = shard.rank();
    const double r = c.rank();
    std::vector<torch::Tensor> values = {torch::arange(5, torch::kFloat) + 10 * r,
                                         torch::arange(3, torch::kFloat) + 100 * r};
    for (int f = 0; f < 2; ++f) {
      torch::Tensor s = e.shard_of_first_rank(values[f]);
      e.add_unit({e.add_flat(s, values[f].numel())});
    }
    expect(e.padded(0) == 6 && e.padded(1) == 4, "padding to a multiple of 2");
    // Rank 0's values everywhere (padding zero), this rank's part of them.
    torch::Tensor want0 = torch::cat({torch::arange(5, torch::kFloat), torch::zeros({1})});
    expect(torch::equal(e.shard(0), want0.narrow(0, 3 * k, 3)), "shard 0 is rank 0's part");
    e.gather(0, false);
    e.gather(1, true);
    expect(e.gathered(0) && e.gathered(1), "gathered");
    e.wait_gathered(0);
    e.wait_gathered(1);
    expect(torch::equal(e.full(0), want0), "the full buffer holds every shard");
    expect(e.counters().allgathers == 2 && e.counters().prefetched == 1 && e.counters().max_gathered == 2,
           "gather counters");
    e.release(0);
    expect(e.full(0).storage().nbytes() == 0 && !e.gathered(0), "released: no memory");
    e.release(1);
    // Gradients: rank r gives (r + 1) everywhere; the average over 4 ranks is 2.5.
    for (int f = 0; f < 2; ++f) e.reduce(f, torch::full({e.padded(f)}, r + 1));
    expect(e.counters().reductions_capped == 1, "the second reduction waited for the first");
    expect(e.counters().max_reductions_in_flight == 1, "at most one in flight");
    e.shard(1).mutable_grad() = torch::ones({2});  // added to, not replaced
    e.finish_reductions();
    expect(e.reductions_pending() == 0, "finished");
    expect(torch::allclose(e.shard(0).grad(), torch::full({3}, 2.5)), "the mean over shard x replicate");
    expect(torch::allclose(e.shard(1).grad(), torch::full({2}, 3.5)), "added to the grad it had");
    expect(e.counters().reduce_scatters == 2 && e.counters().replicate_allreduces == 2, "reduce counters");
    // A part (an optimizer's state of the shard) joined: rank k's part is k + 1.
    torch::Tensor joined = e.full_values(0, torch::full({3}, k + 1.0));
    expect(torch::equal(joined, torch::cat({torch::full({3}, 1.0), torch::full({3}, 2.0)})), "parts joined");
    // The norm over the whole model: every element of every shard's grad counted once.
    const double norm = std::sqrt(6 * 2.5 * 2.5 + 4 * 3.5 * 3.5);
    const double got = e.clip_grad_norm(1.0, 2.0);
    expect(std::abs(got - norm) < 1e-4, "norm " + std::to_string(got) + " != " + std::to_string(norm));
    expect(std::abs(e.shard(0).grad()[0].item<double>() - 2.5 / (norm + 1e-6)) < 1e-5, "clipped");
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

TEST(FlatEngine, OneRankCopiesAndRefusesWhatItCannotRun) {
  EngineOptions o;
  o.compute_dtype = torch::kBFloat16;
  FlatEngine e(nullptr, nullptr, o);
  torch::Tensor s = e.shard_of_first_rank(torch::arange(4, torch::kFloat));
  const int f = e.add_flat(s, 4);
  e.add_unit({f});
  e.gather(0, false);
  e.wait_gathered(0);
  EXPECT_EQ(e.full(0).scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(e.full(0).to(torch::kFloat), torch::arange(4, torch::kFloat)));
  e.reduce(f, torch::full({4}, 2.0));
  e.finish_reductions();
  EXPECT_TRUE(torch::equal(e.shard(f).grad(), torch::full({4}, 2.0)));
  EXPECT_THROW(e.add_flat(torch::zeros({3}), 4), InvalidArgument);                  // wrong size
  EXPECT_THROW(e.add_flat(torch::zeros({4}, torch::kDouble), 4), InvalidArgument);  // not float32
  EXPECT_THROW(e.add_unit({f}), InvalidArgument);                                   // in a unit already
  EXPECT_THROW(e.reduce(f, torch::zeros({5})), InvalidArgument);
  EXPECT_THROW(e.full_values(f, torch::zeros({2})), InvalidArgument);
  EngineOptions bad;
  bad.max_reductions_in_flight = -1;
  EXPECT_THROW(FlatEngine(nullptr, nullptr, bad), InvalidArgument);
}

}  // namespace
}  // namespace heft::parallel::sharded
