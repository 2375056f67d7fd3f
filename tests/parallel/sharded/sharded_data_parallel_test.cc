// ctest-labels: multiproc
// ShardedDataParallel on its own: the paths it claims run (counters): ZeRO-3 gathers every
// unit twice per step (forward and backward) with prefetches, holding at most the root and
// two units at once; ZeRO-2 gathers once and keeps them; hybrid adds one replicate
// allreduce per flat parameter; no_sync communicates no gradients. Parameters are freed
// between steps. Bad units are refused naming what is wrong, and a rank that dies during a
// sharded step makes the other fail with heft::PeerLost instead of hanging.
#include "heft/parallel/sharded/sharded_data_parallel.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include "heft/error.h"
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

}  // namespace
}  // namespace heft::parallel::sharded
