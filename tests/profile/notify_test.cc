// ctest-labels: unit
// A rule's notify action (profile/notify.h): the command gets the finding's JSON on stdin, a
// failing, missing or hanging command is reported (and killed at its timeout) without
// throwing, a command that never reads stdin cannot SIGPIPE the caller, and the URL form
// POSTs the JSON to a server on loopback. Notifier counts deliveries and failures.
#include "heft/profile/notify.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "support/files.h"

namespace heft::profile {
namespace {

using Clock = std::chrono::steady_clock;

TEST(Notify, CommandReadsTheFindingOnStdin) {
  test::TempDir dir;
  const std::string out = dir.path() + "/finding.json";
  const std::string body = R"({"rule":"IOBottleneck","rank":1})";
  const Status s = notify_exec({"/bin/sh", "-c", "cat > " + out}, body, 5);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(test::read_file(out), body);
}

TEST(Notify, FailuresAreReportedNotThrown) {
  const Status status = notify_exec({"/bin/sh", "-c", "exit 3"}, "{}", 5);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().find("'/bin/sh': exited with status 3"), std::string::npos) << status.error();
  const Status missing = notify_exec({"no-such-notify-command-xyz"}, "{}", 5);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("cannot execute"), std::string::npos) << missing.error();
  const auto start = Clock::now();
  const Status hung = notify_exec({"/bin/sh", "-c", "sleep 30"}, "{}", 0.3);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_FALSE(hung.ok());
  EXPECT_NE(hung.error().find("did not finish within 0.3 s"), std::string::npos) << hung.error();
  EXPECT_LT(took, 5);  // killed at the timeout, not after the command's 30 s
}

TEST(Notify, CommandThatIgnoresStdinDoesNotKillTheCaller) {
  // 1 MiB of JSON into `true`, which exits without reading: EPIPE, not SIGPIPE.
  const std::string big = "\"" + std::string(1 << 20, 'x') + "\"";
  Notifier n("test");
  job::NotifyAction a;
  a.exec = {"true"};
  a.timeout_s = 5;
  n.send(a, big);
  n.wait();
  EXPECT_EQ(n.delivered() + n.failed(), 1);
}

TEST(Notify, UrlGetsAPostOfTheJson) {
  httplib::Server server;
  std::mutex mu;
  std::string got, type;
  server.Post("/hook", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    got = req.body;
    type = req.get_header_value("Content-Type");
    res.status = 204;
  });
  server.Post("/broken", [](const httplib::Request&, httplib::Response& res) { res.status = 500; });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread t([&] { server.listen_after_bind(); });
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  const Status ok = notify_url(base + "/hook", R"({"rule":"BatchSize"})", 5);
  EXPECT_TRUE(ok.ok()) << ok.error();
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(got, R"({"rule":"BatchSize"})");
    EXPECT_EQ(type, "application/json");
  }
  const Status broken = notify_url(base + "/broken", "{}", 5);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().find("answered HTTP 500"), std::string::npos) << broken.error();
  server.stop();
  t.join();
  // Nobody listening any more: a failure naming the URL, within the timeout.
  const Status refused = notify_url(base + "/hook", "{}", 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("POST " + base + "/hook"), std::string::npos) << refused.error();
}

TEST(Notify, NotifierCountsDeliveriesAndFailures) {
  test::TempDir dir;
  Notifier n("test");
  job::NotifyAction good;
  good.exec = {"/bin/sh", "-c", "cat > " + dir.path() + "/one"};
  job::NotifyAction bad;
  bad.exec = {"false"};
  bad.url = "http://127.0.0.1:1/nothing";
  bad.timeout_s = 2;
  n.send(good, {{"rule", "Dataloader"}});
  n.send(bad, {{"rule", "Dataloader"}});
  n.send(job::NotifyAction{}, {{"rule", "none"}});  // no action: nothing sent
  n.wait();
  EXPECT_EQ(n.delivered(), 1);
  EXPECT_EQ(n.failed(), 2);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(dir.path() + "/one"))["rule"], "Dataloader");
}

}  // namespace
}  // namespace heft::profile
