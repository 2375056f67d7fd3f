// ctest-labels: multiproc
// Which rank a survivor names when a rank dies: the first rank to see the loss records it in
// the store before breaking its links, and every rank whose links then break names the rank
// in that record, never the neighbour whose links it saw close. The store here applies the
// record's set late (as torch's TCPStore may: its set does not wait for the server, so
// another client's read can overtake it), which is when a rank two hops from the dead one
// used to look too early and name its neighbour.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/error.h"
#include "support/ranks.h"

namespace heft::comm {
namespace {

using test::expect;

// A client of the test store whose sets of "<group>/abort" reach the server 300 ms late
// (through a second connection); everything else goes straight through.
class LateRecordStore : public Store {
 public:
  explicit LateRecordStore(const test::StoreProcess& server)
      : server_(server), store_(server.connect()) {}
  ~LateRecordStore() override {
    for (std::thread& t : late_) t.join();
  }
  void set(const std::string& key, const Bytes& value) override {
    if (key.size() < 6 || key.compare(key.size() - 6, 6, "/abort") != 0)
      return store_->set(key, value);
    late_.emplace_back([this, key, value] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      server_.connect()->set(key, value);
    });
  }
  Bytes get(const std::string& key, Millis timeout) override { return store_->get(key, timeout); }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  bool delete_key(const std::string& key) override { return store_->delete_key(key); }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  const test::StoreProcess& server_;
  std::shared_ptr<Store> store_;
  std::vector<std::thread> late_;
};

// n ranks pass a message along the chain 0 -> 1 -> ... -> n-1 and back, over and over; rank
// `victim` is SIGKILLed after a few rounds. Every survivor must raise PeerLost naming it.
void kill_one_in_a_chain(int n, int victim, bool late_record) {
  test::StoreProcess server;
  CommunicatorOptions options;
  options.token = server.token();
  options.timeout = std::chrono::seconds(30);
  static int run = 0;
  const std::string group = "test/chain" + std::to_string(run++);
  test::RunResult res = test::run_ranks(
      n,
      [&](int rank) {
        std::shared_ptr<Store> store =
            late_record ? std::make_shared<LateRecordStore>(server) : server.connect();
        auto comm = Communicator::create(store, group, rank, n, options);
        std::vector<float> msg(64 << 10, 1.0f);
        const size_t count = msg.size();
        try {
          for (int round = 0; round < 1000; ++round) {
            if (rank == victim && round == 20) raise(SIGKILL);
            if (rank > 0) comm->recv(msg.data(), count, DataType::f32, rank - 1);
            if (rank < n - 1) comm->send(msg.data(), count, DataType::f32, rank + 1);
            if (rank < n - 1) comm->recv(msg.data(), count, DataType::f32, rank + 1);
            if (rank > 0) comm->send(msg.data(), count, DataType::f32, rank - 1);
          }
        } catch (const PeerLost& e) {
          expect(e.peer() == victim, "rank " + std::to_string(rank) + " names rank " +
                                         std::to_string(e.peer()) + ", not the dead rank " +
                                         std::to_string(victim) + ": " + e.what());
          return;
        }
        throw Error("no PeerLost after rank " + std::to_string(victim) + " was killed");
      },
      std::chrono::seconds(90));
  ASSERT_FALSE(res.timed_out) << res.summary();
  for (const test::RankExit& e : res.ranks) {
    if (e.rank == victim) {
      EXPECT_EQ(e.signal, SIGKILL) << res.summary();
      continue;
    }
    EXPECT_EQ(e.exit_code, 0) << res.summary();
  }
}

TEST(AbortRecord, EverySurvivorOfAChainNamesTheDeadRank) {
  kill_one_in_a_chain(4, 3, /*late_record=*/false);
}

TEST(AbortRecord, TheDeadRankIsNamedWhenTheRecordLandsLate) {
  kill_one_in_a_chain(4, 3, /*late_record=*/true);
}

TEST(AbortRecord, ADeadRankInTheMiddleIsNamedOnBothSides) {
  kill_one_in_a_chain(4, 1, /*late_record=*/true);
}

}  // namespace
}  // namespace heft::comm
