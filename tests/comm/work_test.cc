// Work (src/heft/comm/work.h): wait() rethrows the operation's error; on_finish runs at once
// when the operation already finished, else on the finishing thread right after it.
#include "heft/comm/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>

namespace heft::comm {
namespace {

TEST(Work, OnFinishAfterTheFinishRunsAtOnceOnTheCaller) {
  Work w;
  w.finish(nullptr);
  std::thread::id ran_on;
  w.on_finish([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  w.wait();
}

TEST(Work, OnFinishBeforeTheFinishRunsOnTheFinishingThreadAfterWaitersCanSeeIt) {
  Work w;
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  bool done_when_called = false;
  w.on_finish([&] {
    ran_on = std::this_thread::get_id();
    done_when_called = w.test();
    ran = true;
  });
  EXPECT_FALSE(ran);
  std::thread finisher([&] { w.finish(std::make_exception_ptr(std::runtime_error("lost"))); });
  const std::thread::id finisher_id = finisher.get_id();
  finisher.join();
  EXPECT_TRUE(ran);
  EXPECT_EQ(ran_on, finisher_id);
  EXPECT_TRUE(done_when_called);
  EXPECT_THROW(w.wait(), std::runtime_error);
}

}  // namespace
}  // namespace heft::comm
