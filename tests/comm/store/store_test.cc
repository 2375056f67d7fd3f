// ctest-labels: unit
// The Store contract (store.h), run against every implementation: MemoryStore, TcpStore on
// a loopback TcpStoreServer, and PrefixStore over each. A "world" is one set of keys that
// several clients share; each test asks its world for as many clients as it needs.
// PrefixStore's own behaviour (key layout, nesting, timeout) is tested at the end.
// Deliberately left out: what only the TCP store has (auth, broken connections, forked
// processes): tcp_store_test.cc and tcp_store_multiproc_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/store/memory_store.h"
#include "heft/comm/store/prefix_store.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"

namespace heft::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Several clients over one set of keys.
class World {
 public:
  virtual ~World() = default;
  virtual std::shared_ptr<Store> client() = 0;
};

class MemoryWorld : public World {
 public:
  std::shared_ptr<Store> client() override { return store_; }

 private:
  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
};

class TcpWorld : public World {
 public:
  TcpWorld() : server_(TcpStoreServerOptions{"127.0.0.1", 0, "test-token"}) {}
  std::shared_ptr<Store> client() override {
    return std::make_shared<TcpStore>("127.0.0.1", server_.port(), "test-token");
  }

 private:
  TcpStoreServer server_;
};

// Each client is its own PrefixStore over a client of the inner world.
class PrefixWorld : public World {
 public:
  explicit PrefixWorld(std::unique_ptr<World> inner) : inner_(std::move(inner)) {}
  std::shared_ptr<Store> client() override {
    return std::make_shared<PrefixStore>("job-7", inner_->client());
  }

 private:
  std::unique_ptr<World> inner_;
};

struct Backend {
  std::string name;
  std::function<std::unique_ptr<World>()> make;
};

void PrintTo(const Backend& b, std::ostream* os) { *os << b.name; }

std::vector<Backend> backends() {
  return {
      {"Memory", [] { return std::make_unique<MemoryWorld>(); }},
      {"Tcp", [] { return std::make_unique<TcpWorld>(); }},
      {"PrefixOverMemory",
       [] { return std::make_unique<PrefixWorld>(std::make_unique<MemoryWorld>()); }},
      {"PrefixOverTcp", [] { return std::make_unique<PrefixWorld>(std::make_unique<TcpWorld>()); }},
  };
}

double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

class StoreTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    world_ = GetParam().make();
    store_ = world_->client();
  }
  std::unique_ptr<World> world_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetReturnsTheValue) {
  const Bytes binary = {0, 1, 2, 255, 0, 10, 13};
  store_->set("bin", binary);
  store_->set("empty", Bytes{});
  store_->set("text", std::string("hello"));
  EXPECT_EQ(store_->get("bin", milliseconds(1000)), binary);
  EXPECT_EQ(store_->get("empty", milliseconds(1000)), Bytes{});
  EXPECT_EQ(store_->get_string("text"), "hello");
}

TEST_P(StoreTest, SetReplacesAnEarlierValue) {
  store_->set("k", std::string("one"));
  store_->set("k", std::string("two"));
  EXPECT_EQ(store_->get_string("k"), "two");
}

TEST_P(StoreTest, LargeValueRoundTrips) {
  Bytes big(4 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + i / 251);
  store_->set("big", big);
  EXPECT_EQ(store_->get("big", milliseconds(5000)), big);
}

TEST_P(StoreTest, AddCountsFromZeroAndStoresDecimalText) {
  EXPECT_EQ(store_->add("n", 1), 1);
  EXPECT_EQ(store_->add("n", 2), 3);
  EXPECT_EQ(store_->get_string("n"), "3");
  EXPECT_EQ(store_->add("n", -10), -7);
  EXPECT_EQ(store_->get_string("n"), "-7");
  EXPECT_EQ(store_->add("n", 0), -7);
  store_->set("m", std::string("41"));
  EXPECT_EQ(store_->add("m", 1), 42);
}

TEST_P(StoreTest, AddOnNonIntegerIsInvalidArgumentAndTheStoreStaysUsable) {
  store_->set("word", std::string("seven"));
  try {
    store_->add("word", 1);
    FAIL() << "add on a non-integer did not throw";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("word"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a decimal"), std::string::npos) << e.what();
  }
  store_->set("blank", Bytes{});
  EXPECT_THROW(store_->add("blank", 1), InvalidArgument);
  store_->set("spaced", std::string(" 1"));
  EXPECT_THROW(store_->add("spaced", 1), InvalidArgument);
  store_->set("huge", std::string("9223372036854775807"));
  EXPECT_THROW(store_->add("huge", 1), InvalidArgument);
  EXPECT_EQ(store_->get_string("word"), "seven");
  EXPECT_EQ(store_->add("fine", 5), 5);
}

TEST_P(StoreTest, CheckIsTrueOnlyWhenEveryKeyExists) {
  EXPECT_FALSE(store_->check({"a"}));
  store_->set("a", std::string("1"));
  EXPECT_TRUE(store_->check({"a"}));
  EXPECT_FALSE(store_->check({"a", "b"}));
  store_->add("b", 1);
  EXPECT_TRUE(store_->check({"a", "b"}));
  EXPECT_TRUE(store_->check({}));
}

TEST_P(StoreTest, DeleteKeyReportsWhetherTheKeyExisted) {
  store_->set("d", std::string("x"));
  EXPECT_TRUE(store_->delete_key("d"));
  EXPECT_FALSE(store_->delete_key("d"));
  EXPECT_FALSE(store_->check({"d"}));
  EXPECT_EQ(store_->add("d", 4), 4);  // a deleted counter starts again from zero
}

TEST_P(StoreTest, BadKeysAreInvalidArgument) {
  EXPECT_THROW(store_->set("", std::string("x")), InvalidArgument);
  EXPECT_THROW(store_->get("", milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store_->add("", 1), InvalidArgument);
  EXPECT_THROW(store_->wait({"ok", ""}, milliseconds(10)), InvalidArgument);
  EXPECT_THROW(store_->set(std::string(5000, 'k'), std::string("x")), InvalidArgument);
  store_->set("still-works", std::string("yes"));
  EXPECT_EQ(store_->get_string("still-works"), "yes");
}

TEST_P(StoreTest, ValueOver64MiBIsInvalidArgument) {
  EXPECT_THROW(store_->set("v", Bytes((size_t{64} << 20) + 1)), InvalidArgument);
}

TEST_P(StoreTest, GetOfMissingKeyTimesOutAfterTheTimeout) {
  const auto t0 = steady_clock::now();
  try {
    store_->get("never", milliseconds(700));
    FAIL() << "get of a missing key returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
  }
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.7);
  EXPECT_LT(took, 0.7 + 3.0);
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  store_->set("here", std::string("1"));
  const auto t0 = steady_clock::now();
  try {
    store_->wait({"here", "gone-1", "gone-2"}, milliseconds(500));
    FAIL() << "wait on missing keys returned";
  } catch (const Timeout& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gone-1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gone-2"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("'here'"), std::string::npos) << msg;
  }
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 0.5 + 3.0);
}

TEST_P(StoreTest, StoreIsUsableAfterATimeout) {
  EXPECT_THROW(store_->get("late", milliseconds(100)), Timeout);
  store_->set("late", std::string("now"));
  EXPECT_EQ(store_->get_string("late"), "now");
}

TEST_P(StoreTest, DefaultTimeoutAppliesWhenNoneIsGiven) {
  store_->set_timeout(milliseconds(300));
  const auto t0 = steady_clock::now();
  EXPECT_THROW(store_->get("absent"), Timeout);
  EXPECT_THROW(store_->wait({"absent"}), Timeout);
  EXPECT_LT(seconds_since(t0), 0.6 + 3.0);
}

TEST_P(StoreTest, WaitingGetIsWokenBySetFromAnotherClient) {
  std::shared_ptr<Store> other = world_->client();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(200));
    other->set("wake", std::string("up"));
  });
  const auto t0 = steady_clock::now();
  EXPECT_EQ(store_->get_string("wake", milliseconds(10000)), "up");
  EXPECT_LT(seconds_since(t0), 5.0);
  setter.join();
}

TEST_P(StoreTest, LargestTimeoutMeansWaitUntilSet) {
  std::shared_ptr<Store> other = world_->client();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    other->set("forever", std::string("here"));
  });
  EXPECT_EQ(store_->get_string("forever", milliseconds::max()), "here");
  store_->wait({"forever"}, milliseconds::max());
  setter.join();
}

TEST_P(StoreTest, WaitReturnsOnceEveryKeyExists) {
  std::shared_ptr<Store> other = world_->client();
  std::thread setter([&] {
    other->set("w1", std::string("x"));
    std::this_thread::sleep_for(milliseconds(100));
    other->add("w2", 1);
  });
  store_->wait({"w1", "w2"}, milliseconds(10000));
  EXPECT_TRUE(store_->check({"w1", "w2"}));
  setter.join();
}

TEST_P(StoreTest, ConcurrentAddsFromManyClientsGiveTheExactCount) {
  constexpr int kClients = 16;
  constexpr int kAddsEach = 200;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(world_->client());
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        for (int j = 0; j < kAddsEach; ++j) clients[i]->add("counter", 1);
      } catch (const std::exception&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(store_->add("counter", 0), kClients * kAddsEach);
  EXPECT_EQ(store_->get_string("counter"), std::to_string(kClients * kAddsEach));
}

TEST_P(StoreTest, OneClientIsSafeToShareBetweenThreads) {
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        store_->add("shared", 1);
        store_->set("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->add("shared", 0), kThreads * 50);
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(store_->get_string("t" + std::to_string(i)), "49");
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::ValuesIn(backends()),
                         [](const auto& info) { return info.param.name; });

// ---- PrefixStore's own behaviour -----------------------------------------------------

TEST(PrefixStoreTest, KeysLandUnderPrefixSlashKeyInTheBase) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore store("job", base);
  store.set("addr", std::string("h:1"));
  store.add("count", 2);
  EXPECT_EQ(base->get_string("job/addr", milliseconds(0)), "h:1");
  EXPECT_EQ(base->get_string("job/count", milliseconds(0)), "2");
  EXPECT_FALSE(base->check({"addr"}));
  EXPECT_TRUE(store.check({"addr", "count"}));
  EXPECT_TRUE(store.delete_key("addr"));
  EXPECT_FALSE(base->check({"job/addr"}));
}

TEST(PrefixStoreTest, DifferentPrefixesKeepKeysApart) {
  auto base = std::make_shared<MemoryStore>();
  PrefixStore a("a", base);
  PrefixStore b("b", base);
  a.set("k", std::string("from a"));
  b.set("k", std::string("from b"));
  EXPECT_EQ(a.get_string("k"), "from a");
  EXPECT_EQ(b.get_string("k"), "from b");
  EXPECT_EQ(a.add("n", 1), 1);
  EXPECT_EQ(b.add("n", 1), 1);
}

TEST(PrefixStoreTest, PrefixStoresNest) {
  auto base = std::make_shared<MemoryStore>();
  auto job = std::make_shared<PrefixStore>("job", base);
  PrefixStore group("g1", job);
  group.set("k", std::string("v"));
  EXPECT_EQ(base->get_string("job/g1/k", milliseconds(0)), "v");
  EXPECT_EQ(group.prefix(), "g1");
  EXPECT_EQ(group.base(), job);
}

TEST(PrefixStoreTest, InheritsTheBaseTimeoutThenKeepsItsOwn) {
  auto base = std::make_shared<MemoryStore>();
  base->set_timeout(milliseconds(1234));
  PrefixStore store("p", base);
  EXPECT_EQ(store.timeout(), milliseconds(1234));
  store.set_timeout(milliseconds(50));
  EXPECT_EQ(base->timeout(), milliseconds(1234));
  EXPECT_THROW(store.get("missing"), Timeout);  // uses 50 ms, not the base's
}

TEST(PrefixStoreTest, TimeoutNamesThePrefixedKey) {
  PrefixStore store("job-3", std::make_shared<MemoryStore>());
  try {
    store.wait({"rank-0"}, milliseconds(20));
    FAIL() << "wait returned";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("job-3/rank-0"), std::string::npos) << e.what();
  }
}

TEST(PrefixStoreTest, NullBaseIsInvalidArgument) {
  EXPECT_THROW(PrefixStore("p", nullptr), InvalidArgument);
}

}  // namespace
}  // namespace heft::comm
