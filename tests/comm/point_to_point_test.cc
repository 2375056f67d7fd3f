// ctest-labels: multiproc
// Batched point-to-point (Communicator::exchange): what pipeline stages need. Two ranks that
// both send a large message first must not deadlock; tagged messages arrive in order; a
// receive that does not match its sender fails at once, naming both sides.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using test::expect;

// 16 MiB each way: far past the socket buffers, so separate send() then recv() calls on
// both ranks would wait for each other until the deadline.
TEST(PointToPoint, BothRanksSendLargeMessagesFirstWithoutDeadlock) {
  test::StoreProcess store;
  CommunicatorOptions options;
  options.timeout = std::chrono::seconds(30);
  const size_t n = size_t{4} << 20;  // floats
  auto res = test::run_world(2, store, [n](Communicator& c) {
    const int other = 1 - c.rank();
    std::vector<float> out(n), in(n, -1.0f);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(c.rank() * 1000 + i % 997);
    const auto start = std::chrono::steady_clock::now();
    c.exchange({P2POp::send(out.data(), n, DataType::f32, other, 7),
                P2POp::recv(in.data(), n, DataType::f32, other, 7)});
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += in[i] != static_cast<float>(other * 1000 + i % 997);
    expect(wrong == 0, std::to_string(wrong) + " wrong elements");
    expect(s < 20, "the exchange took " + std::to_string(s) + " s");  // a deadlock: 30 s
  }, options);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// A ring over odd and even sizes, two tagged messages to each neighbour in one exchange,
// mixed with a collective on the same communicator before and after.
TEST(PointToPoint, TaggedMessagesAroundARingArriveInOrder) {
  for (int world : {3, 4, 7}) {
    test::StoreProcess store;
    auto res = test::run_world(world, store, [](Communicator& c) {
      const int n = c.size(), r = c.rank(), right = (r + 1) % n, left = (r + n - 1) % n;
      int32_t sum = r;
      c.allreduce(&sum, 1, DataType::i32, ReduceOp::sum);
      std::vector<double> a(1001, r + 0.5), b(3, r * 2.0), got_a(1001), got_b(3);
      c.exchange({P2POp::send(a.data(), a.size(), DataType::f64, right, 1),
                  P2POp::send(b.data(), b.size(), DataType::f64, right, 2),
                  P2POp::recv(got_a.data(), got_a.size(), DataType::f64, left, 1),
                  P2POp::recv(got_b.data(), got_b.size(), DataType::f64, left, 2)});
      expect(got_a[0] == left + 0.5 && got_a[1000] == left + 0.5, "first message from the left");
      expect(got_b[2] == left * 2.0, "second message from the left");
      c.barrier();
    });
    EXPECT_TRUE(res.all_ok()) << "world " << world << ": " << res.summary();
  }
}

TEST(PointToPoint, AMismatchedReceiveFailsAtOnceNamingBothSides) {
  test::StoreProcess store;
  CommunicatorOptions options;
  options.timeout = std::chrono::seconds(60);
  auto res = test::run_world(2, store, [](Communicator& c) {
    std::vector<float> x(1000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    try {
      if (c.rank() == 0) c.send(x.data(), x.size(), DataType::f32, 1, 5);
      else c.recv(x.data(), x.size(), DataType::f32, 0, 6);
      if (c.rank() == 1) expect(false, "the mismatched receive succeeded");
      c.barrier();  // rank 0: fails once rank 1 broke its links
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      expect(what.find("recv(from rank 0, tag 6, 4000 B) does not match the message rank 0 "
                       "sent (tag 5, 4000 B)") != std::string::npos, what);
    } catch (const PeerLost&) {
      expect(c.rank() == 0, "only rank 0 should see the peer break");
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    expect(s < 10, "the mismatch took " + std::to_string(s) + " s to surface");
  }, options);
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

// The fast path of blocking calls: on an idle communicator they run on the caller's thread
// (no hand-off to the communicator thread); async calls and calls behind queued work do not.
TEST(Communicator, BlockingCallsOnAnIdleCommunicatorRunInline) {
  test::StoreProcess store;
  auto res = test::run_world(2, store, [](Communicator& c) {
    float x = 1;
    const uint64_t before = c.inline_operations();
    c.allreduce(&x, 1, DataType::f32, ReduceOp::sum);
    expect(c.inline_operations() == before + 1, "a blocking allreduce ran inline");
    c.allreduce_async(&x, &x, 1, DataType::f32, ReduceOp::sum)->wait();
    expect(c.inline_operations() == before + 1, "an async allreduce went to the queue");
    float y = 2;
    auto queued = c.allreduce_async(&y, &y, 1, DataType::f32, ReduceOp::sum);
    c.barrier();  // ordered after the queued allreduce: may run inline only once it finished
    queued->wait();
    expect(x == 4 && y == 4, "results");
  });
  EXPECT_TRUE(res.all_ok()) << res.summary();
}

}  // namespace
}  // namespace heft::comm
