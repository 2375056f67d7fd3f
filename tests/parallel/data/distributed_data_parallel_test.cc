// ctest-labels: multiproc
// DistributedDataParallel against one process on the global batch (the definition of
// correctness in DESIGN.md): same loss at every step and same parameters after K steps on
// 1, 2, 3 and 4 forked ranks, with an uneven last batch; no_sync accumulation; the bf16 path
// within its looser tolerance; overlap of the first bucket's allreduce with backward; the
// errors for unused parameters and for ranks with different models.
#include "heft/parallel/data/distributed_data_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <iostream>
#include <sstream>

#include "heft/comm/store/memory_store.h"
#include "heft/error.h"
#include "heft/train/distributed_sampler.h"
#include "support/ranks.h"

namespace heft::parallel::data {
namespace {

using test::expect;
using train::DistributedSampler;

// float32 results of N ranks differ from one process only by summation order.
constexpr double kTolerance = 2e-5;
// bf16 carries ~3 significant digits per gradient element.
constexpr double kBf16Tolerance = 2e-2;

struct Net : torch::nn::Module {
  Net(int64_t in, int64_t hidden, int64_t out, bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(in, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, out));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(out, out));
  }
  torch::Tensor forward(torch::Tensor x) {  // (B, in) -> (B, out)
    return fc3(torch::tanh(fc2(torch::tanh(fc1(x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
};

struct Config {
  int steps = 5;              // optimizer steps
  int64_t global_batch = 12;  // samples per step (divisible by 1..4 and by micro_steps * n)
  int64_t dataset = 0;        // 0: exactly steps * global_batch
  int micro_steps = 1;        // > 1: accumulate under no_sync
  DistributedDataParallelOptions ddp;
  double tolerance = kTolerance;
};

struct Data {
  torch::Tensor x, y;
};

Data make_data(int64_t n) {
  torch::manual_seed(123);
  return {torch::randn({n, 8}), torch::randint(0, 4, {n}, torch::kLong)};
}

std::shared_ptr<Net> make_net() {
  torch::manual_seed(7);
  return std::make_shared<Net>(8, 16, 4);
}

torch::Tensor rows(const torch::Tensor& t, const std::vector<int64_t>& idx) {
  return t.index_select(0, torch::tensor(idx, torch::kLong));
}

double max_param_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0;
  auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// Trains DDP on this rank and the one-process reference on the global batch side by side,
// comparing the global loss of each step and the parameters at the end.
void check_equivalence(comm::Communicator& c, const Config& cfg) {
  torch::set_num_threads(1);
  ProcessGroup group(c);
  const int n = group.size();
  const int64_t size = cfg.dataset ? cfg.dataset : cfg.steps * cfg.global_batch;
  const Data data = make_data(size);
  auto reference = make_net();
  // Replicas other than rank 0's start different: DDP must broadcast rank 0's.
  torch::manual_seed(1000 + group.rank());
  auto replica = group.rank() == 0 ? make_net() : std::make_shared<Net>(8, 16, 4);
  DistributedDataParallel ddp(replica, group, cfg.ddp);
  torch::optim::SGD ref_opt(reference->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD opt(replica->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  DistributedSampler sampler({size, cfg.global_batch, group.rank(), n, 5, 0, true});
  expect(sampler.steps_per_epoch() == cfg.steps, "steps per epoch");
  double worst_loss = 0;
  for (int step = 0; step < cfg.steps; ++step) {
    const std::vector<int64_t> all = sampler.global_batch(step);
    ref_opt.zero_grad();
    torch::Tensor ref_loss = torch::nn::functional::cross_entropy(
        reference->forward(rows(data.x, all)), rows(data.y, all));
    ref_loss.backward();
    ref_opt.step();

    const DistributedSampler::Batch mine = sampler.batch(step);
    const auto global = static_cast<double>(mine.global_size);
    opt.zero_grad();
    double local_sum = 0;
    const size_t per_micro = mine.indices.size() / static_cast<size_t>(cfg.micro_steps);
    for (int m = 0; m < cfg.micro_steps; ++m) {
      std::vector<int64_t> idx(mine.indices.begin() + m * per_micro,
                               m + 1 == cfg.micro_steps
                                   ? mine.indices.end()
                                   : mine.indices.begin() + (m + 1) * per_micro);
      torch::Tensor sum = torch::nn::functional::cross_entropy(
          replica->forward(rows(data.x, idx)), rows(data.y, idx),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      local_sum += sum.item<double>();
      torch::Tensor weighted = sum * (n / global);
      if (m + 1 < cfg.micro_steps) {
        auto no_sync = ddp.no_sync();
        weighted.backward();
      } else {
        weighted.backward();
      }
    }
    opt.step();
    torch::Tensor l = torch::tensor({local_sum}, torch::kDouble);
    group.allreduce(l);
    const double ddp_loss = l.item<double>() / global;
    const double diff = std::abs(ddp_loss - ref_loss.item<double>());
    worst_loss = std::max(worst_loss, diff);
    expect(diff <= cfg.tolerance, "step " + std::to_string(step) + ": loss " +
                                      std::to_string(ddp_loss) + " vs " +
                                      std::to_string(ref_loss.item<double>()) +
                                      " on one process, difference " + std::to_string(diff));
  }
  const double worst_param = max_param_difference(*replica, *reference);
  if (group.rank() == 0)
    std::cerr << "world " << n << ": largest loss difference " << worst_loss
              << ", largest parameter difference " << worst_param << " (tolerance " << cfg.tolerance
              << ", " << ddp.buckets().size() << " buckets)\n";
  expect(worst_param <= cfg.tolerance,
         "parameters differ from one process by " + std::to_string(worst_param));
}

void run_on(int n, const Config& cfg) {
  test::StoreProcess store;
  auto result =
      test::run_world(n, store, [&](comm::Communicator& c) { check_equivalence(c, cfg); });
  EXPECT_TRUE(result.all_ok()) << "world " << n << ": " << result.summary();
}

TEST(DistributedDataParallel, EqualsOneProcessOnTheGlobalBatchOn1To4Ranks) {
  Config cfg;
  cfg.ddp.first_bucket_bytes = 64;  // several buckets: fc3 | fc2 | fc1 ...
  cfg.ddp.bucket_bytes = 512;
  for (int n : {1, 2, 3, 4}) run_on(n, cfg);
}

TEST(DistributedDataParallel, EqualsOneProcessWithAnUnevenLastBatchAndOneBucket) {
  Config cfg;
  cfg.steps = 4;
  cfg.dataset = 3 * 12 + 7;  // the last global batch has 7 samples: 2+2+2+1 on 4 ranks
  for (int n : {3, 4}) run_on(n, cfg);
}

TEST(DistributedDataParallel, NoSyncAccumulationEqualsOneStepOnTheWholeBatch) {
  Config cfg;
  cfg.micro_steps = 3;
  cfg.global_batch = 24;  // per rank 12 on 2 ranks = 3 micro-batches of 4
  cfg.ddp.first_bucket_bytes = 64;
  cfg.ddp.bucket_bytes = 512;
  run_on(2, cfg);
}

TEST(DistributedDataParallel, Bf16CompressionStaysWithinItsTolerance) {
  Config cfg;
  cfg.ddp.bf16_compression = true;
  cfg.tolerance = kBf16Tolerance;
  run_on(3, cfg);
}

// A model whose first layer's weight gradient is expensive (a 512x1024x1024 matmul), with a
// bucket per parameter: the last layers' buckets must be launched, and the first finished,
// while that matmul still runs, i.e. before backward's last gradient arrives.
TEST(DistributedDataParallel, FirstBucketAllreduceStartsBeforeBackwardEnds) {
  test::StoreProcess store;
  auto result = test::run_world(2, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    ProcessGroup group(c);
    torch::manual_seed(1);
    auto net = std::make_shared<Net>(1024, 1024, 4);
    DistributedDataParallelOptions o;
    o.first_bucket_bytes = 1;
    o.bucket_bytes = 1;
    DistributedDataParallel ddp(net, group, o);
    expect(ddp.buckets().size() == 6, "one bucket per parameter");
    expect(ddp.buckets()[0].parameters[0] == "fc3.bias", "bucket 0 holds the last layer");
    torch::Tensor x = torch::randn({512, 1024});
    // Whether the first bucket finishes before backward ends also depends on when the peer's
    // process gets a core (2 ranks and their communicator threads share 2 here): over five
    // steps (the same count on every rank) it must happen at least once.
    bool done_during_backward = false;
    for (int iter = 0; iter < 5; ++iter) {
      net->zero_grad();
      net->forward(x).square().mean().backward();
      if (iter > 0) done_during_backward |= ddp.last_timeline().bucket_done_during_backward[0];
    }
    const BackwardTimeline& t = ddp.last_timeline();
    auto ms = [&](BackwardTimeline::TimePoint p) {
      return std::chrono::duration<double, std::milli>(p - t.first_gradient).count();
    };
    std::ostringstream os;
    os << "rank " << group.rank() << ": first bucket launched at " << ms(t.bucket_launched[0])
       << " ms, seen done during backward: " << t.bucket_done_during_backward[0]
       << "; last gradient at " << ms(t.last_gradient) << " ms; all reduced at " << ms(t.finished)
       << " ms";
    std::cerr << os.str() << "\n";
    expect(t.bucket_launched[0] < t.last_gradient,
           "first bucket launched after backward: " + os.str());
    expect(done_during_backward,
           "first bucket not finished during backward in any of 4 steps: " + os.str());
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

// A rank that dies between steps: the other's backward raises heft::PeerLost (carried out
// of the autograd engine with its type) instead of hanging.
TEST(DistributedDataParallel, LostPeerRaisesPeerLostFromBackward) {
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.timeout = std::chrono::seconds(20);
  auto result = test::run_world(
      2, store,
      [](comm::Communicator& c) {
        torch::set_num_threads(1);
        ProcessGroup group(c);
        auto net = make_net();
        DistributedDataParallel ddp(net, group);
        if (c.rank() == 1) _exit(0);
        const auto start = std::chrono::steady_clock::now();
        try {
          net->forward(torch::randn({4, 8})).sum().backward();
        } catch (const PeerLost& e) {
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          std::cerr << "rank 0 after " << s << " s: " << e.what() << "\n";
          expect(e.peer() == 1, std::string("lost peer named: ") + e.what());
          return;
        }
        expect(false, "backward returned without the peer");
      },
      options, std::chrono::seconds(60));
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

// A world of one in this process.
struct Local {
  Local() {
    comm::CommunicatorOptions o;
    o.token = "t";
    comm = comm::Communicator::create(std::make_shared<comm::MemoryStore>(), "ddp", 0, 1, o);
    group = std::make_unique<ProcessGroup>(*comm);
  }
  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<ProcessGroup> group;
};

TEST(DistributedDataParallel, UnusedParameterIsAnErrorNamingIt) {
  Local local;
  auto net = std::make_shared<Net>(8, 16, 4, /*with_unused=*/true);
  DistributedDataParallel ddp(net, *local.group);
  std::string message;
  try {
    net->forward(torch::randn({3, 8})).sum().backward();
  } catch (const std::exception& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("2 parameter(s) received no gradient in this backward pass: "
                         "unused.bias, unused.weight"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("find_unused_parameters"), std::string::npos) << message;
}

TEST(DistributedDataParallel, FindUnusedParametersToleratesThem) {
  Local local;
  auto net = std::make_shared<Net>(8, 16, 4, /*with_unused=*/true);
  DistributedDataParallelOptions o;
  o.find_unused_parameters = true;
  DistributedDataParallel ddp(net, *local.group, o);
  for (int i = 0; i < 2; ++i) net->forward(torch::randn({3, 8})).sum().backward();
  ASSERT_TRUE(net->unused->weight.grad().defined());
  EXPECT_EQ(net->unused->weight.grad().abs().sum().item<double>(), 0.0);
  EXPECT_GT(net->fc1->weight.grad().abs().sum().item<double>(), 0.0);
}

TEST(DistributedDataParallel, RanksWithDifferentModelsAreRejected) {
  test::StoreProcess store;
  auto result = test::run_world(2, store, [](comm::Communicator& c) {
    ProcessGroup group(c);
    auto net = std::make_shared<Net>(8, c.rank() == 0 ? 16 : 17, 4);
    try {
      DistributedDataParallel ddp(net, group);
    } catch (const InvalidArgument& e) {
      expect(std::string(e.what()).find("the ranks' models differ") != std::string::npos, e.what());
      return;
    }
    expect(false, "no error for different models");
  });
  EXPECT_TRUE(result.all_ok()) << result.summary();
}

}  // namespace
}  // namespace heft::parallel::data
