// ctest-labels: multiproc
// ProcessGroup on tensors: every collective on world sizes {1, 2, 3, 4} against closed forms
// for each supported dtype, and the errors for tensors outside the contract.
#include "heft/parallel/process_group.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "heft/comm/store/memory_store.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::parallel {
namespace {

using test::expect;

const torch::ScalarType kTypes[] = {torch::kFloat,    torch::kDouble, torch::kHalf,
                                    torch::kBFloat16, torch::kInt,    torch::kLong};

// scale * [1, 2, ..., n] in dtype t.
torch::Tensor scaled(double scale, int64_t n, torch::ScalarType t) {
  return (torch::arange(1, n + 1, torch::kDouble) * scale).to(t);
}

// Rank r's tensor: (r + 1) * [1, 2, ..., n] (small integers: exact in every dtype).
torch::Tensor contribution(int r, int64_t n, torch::ScalarType t) { return scaled(r + 1, n, t); }

void check_collectives(comm::Communicator& c) {
  torch::set_num_threads(1);
  ProcessGroup g(c);
  const int n = g.size(), r = g.rank();
  const double tri = n * (n + 1) / 2.0;  // sum of (r + 1)
  for (torch::ScalarType t : kTypes) {
    const std::string dt = c10::toString(t);
    // allreduce sum, sync and async
    torch::Tensor a = contribution(r, 37, t);
    g.allreduce(a);
    expect(torch::equal(a, scaled(tri, 37, t)), "allreduce sum " + dt);
    torch::Tensor b = contribution(r, 5, t);
    auto w = g.allreduce_async(b, comm::ReduceOp::max);
    w->wait();
    expect(w->test() && torch::equal(b, contribution(n - 1, 5, t)), "allreduce_async max " + dt);
    // broadcast from the last rank
    torch::Tensor c2 = contribution(r, 11, t);
    g.broadcast(c2, n - 1);
    expect(torch::equal(c2, contribution(n - 1, 11, t)), "broadcast " + dt);
    // allgather: block j is rank j's
    torch::Tensor gathered = g.allgather(contribution(r, 3, t));
    expect(gathered.sizes() == torch::IntArrayRef({n, 3}), "allgather shape " + dt);
    for (int j = 0; j < n; ++j)
      expect(torch::equal(gathered[j], contribution(j, 3, t)), "allgather block " + dt);
    // reduce_scatter: every rank sends contribution(r, 4n); rank r gets its block summed
    torch::Tensor in = contribution(r, 4 * n, t);
    torch::Tensor out = torch::empty({4}, in.options());
    g.reduce_scatter(in, out);
    torch::Tensor want = scaled(tri, 4 * n, t).narrow(0, 4 * r, 4);
    expect(torch::equal(out, want), "reduce_scatter " + dt);
  }
  g.barrier();
  g.barrier_async()->wait();
}

TEST(ProcessGroup, CollectivesMatchClosedFormsOnWorldSizes1To4) {
  for (int n : {1, 2, 3, 4}) {
    test::StoreProcess store;
    auto result = test::run_world(n, store, check_collectives);
    EXPECT_TRUE(result.all_ok()) << "world " << n << ": " << result.summary();
  }
}

// A world of one in this process (no fork needed to check argument errors).
struct Local {
  Local() {
    comm::CommunicatorOptions o;
    o.token = "t";
    comm = comm::Communicator::create(std::make_shared<comm::MemoryStore>(), "pg", 0, 1, o);
  }
  std::unique_ptr<comm::Communicator> comm;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

TEST(ProcessGroup, RejectsTensorsOutsideTheContractNamingWhatIsWrong) {
  Local local;
  ProcessGroup g(*local.comm);
  // bool is not a communicator dtype (uint8, int8 and int16 are, since the op set grew).
  torch::Tensor flags = torch::zeros({4}, torch::kBool);
  EXPECT_NE(error_of([&] { g.allreduce(flags); }).find("unsupported tensor dtype Bool"),
            std::string::npos)
      << error_of([&] { g.allreduce(flags); });
  torch::Tensor t = torch::zeros({3, 4}).t();
  const std::string nc = error_of([&] { g.allreduce(t); });
  EXPECT_NE(nc.find("ProcessGroup::allreduce: tensor is not contiguous"), std::string::npos) << nc;
  EXPECT_NE(nc.find("call .contiguous()"), std::string::npos) << nc;
  torch::Tensor undefined;
  EXPECT_NE(error_of([&] { g.broadcast(undefined, 0); }).find("undefined tensor"),
            std::string::npos);
  torch::Tensor x = torch::zeros({4});
  EXPECT_NE(error_of([&] { g.broadcast(x, 1); }).find("root 1 is outside the group of 1"),
            std::string::npos);
  torch::Tensor out = torch::zeros({5});
  EXPECT_NE(error_of([&] { g.allgather(x, out); }).find("output has 5 elements, expected 4"),
            std::string::npos);
  torch::Tensor outd = torch::zeros({4}, torch::kDouble);
  EXPECT_NE(error_of([&] { g.allgather(x, outd); }).find("output dtype Double differs"),
            std::string::npos);
}

}  // namespace
}  // namespace heft::parallel

namespace heft::parallel {
namespace {

// Pipeline neighbours that both send their activations first: one exchange each, large
// tensors, no deadlock; then a tagged send/recv pair.
TEST(ProcessGroup, NeighboursSendingLargeTensorsFirstDoNotDeadlock) {
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.timeout = std::chrono::seconds(30);
  auto res = test::run_world(2, store, [](comm::Communicator& c) {
    torch::set_num_threads(1);
    ProcessGroup g(c);
    const int other = 1 - g.rank();
    torch::Tensor out = torch::full({1024, 4096}, static_cast<float>(g.rank() + 1));  // 16 MiB
    torch::Tensor in = torch::zeros({1024, 4096});
    g.exchange({TensorP2P::to(out, other, 3), TensorP2P::from(in, other, 3)});
    expect(torch::equal(in, torch::full({1024, 4096}, static_cast<float>(other + 1))),
           "the neighbour's tensor");
    torch::Tensor grad = torch::arange(10, torch::kDouble);
    if (g.rank() == 0) {
      g.send_async(grad, 1, 9)->wait();
    } else {
      torch::Tensor got = torch::zeros(10, torch::kDouble);
      g.recv_async(got, 0, 9)->wait();
      expect(torch::equal(got, grad), "send/recv with a tag");
    }
  }, options);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// HEFT_COMPRESSION=bf16 (the communicator's default) must not make tensor allreduces (DDP's
// gradients) lossy: 1 + 2^-12 is not a bf16 value, and the sum must stay exact.
TEST(ProcessGroup, TheCommunicatorsDefaultCompressionDoesNotTouchTensors) {
  test::StoreProcess store;
  comm::CommunicatorOptions options;
  options.compression = comm::Compression::kBf16;
  auto res = test::run_world(2, store, [](comm::Communicator& c) {
    ProcessGroup g(c);
    torch::Tensor x = torch::full({1000}, 1.0f + 1.0f / 4096);
    g.allreduce(x);
    expect(torch::equal(x, torch::full({1000}, 2.0f + 2.0f / 4096)), "exact f32 sum");
  }, options);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

}  // namespace
}  // namespace heft::parallel
