// ctest-labels: multiproc
// The console's log route over a job folder its worker vandalized (regression test of the finding
// "64 console requests for a FIFO log froze the console for good"): a real `heft train` whose rank
// 0 made its log a FIFO and rank 1 a link to /dev/zero, a real `heft console` over it. 64
// concurrent requests for the FIFO log (as many as the console has workers) each get 409 naming the
// log at once (within 4 s on a loaded machine), a following request for the job list still answers
// 200, the link gets 409 too, and a normal job's log still reads. A log read that outlives the
// request's deadline (limits.file_read_s) gets 503.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "heft/profile/console_server.h"
#include "support/files.h"
#include "support/heft_process.h"

namespace {

using Clock = std::chrono::steady_clock;
using heft::test::describe;
using heft::test::HeftProcess;
using heft::test::Outcome;
using heft::test::read_file;
using heft::test::TempDir;
using std::chrono::seconds;

const std::string kHeft = HEFT_BINARY_DIR "/heft";
const std::string kToken = "console-job-files-test-token";

struct Reply {
  int status = 0;  // 0: no answer within the timeout
  std::string body;
  double seconds = 0;
};

// GET `path` from the console on 127.0.0.1:port with the token, waiting at most timeout_ms.
Reply get(int port, const std::string& path, int timeout_ms = 5000) {
  Reply r;
  const auto start = Clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return r;
  }
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1:" +
                              std::to_string(port) + "\r\nAuthorization: Bearer " + kToken +
                              "\r\nConnection: close\r\n\r\n";
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buf[4096];
  for (;;) {
    const auto spent =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    const int left = timeout_ms - static_cast<int>(spent);
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::smatch m;
  if (std::regex_search(response, m, std::regex("^HTTP/1\\.[01] ([0-9]{3})")))
    r.status = std::stoi(m[1]);
  const size_t body = response.find("\r\n\r\n");
  if (body != std::string::npos) r.body = response.substr(body + 4);
  return r;
}

// The port the console printed in its first line (stdout to `out`), or 0.
int console_port(const std::string& out, seconds timeout = seconds(20)) {
  const auto deadline = Clock::now() + timeout;
  std::smatch m;
  while (Clock::now() < deadline) {
    const std::string text = read_file(out);
    if (std::regex_search(text, m, std::regex("serving http://127\\.0\\.0\\.1:([0-9]+)/")))
      return std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

TEST(ConsoleJobFiles, FifoAndLinkLogsGet409AndTheConsoleKeepsAnswering) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::string>> env = {
      {"HEFT_HOME", dir.path() + "/home"}, {"HEFT_CONSOLE_TOKEN", kToken}};
  const std::string jobdir = dir.path() + "/home/jobs/vandal";
  const std::string spec = dir.path() + "/vandal.yaml";
  std::ofstream(spec) << "name: vandal\nentry_point: [/bin/sh, -c, 'log=$HEFT_JOB_DIR/logs/"
                         "rank-$RANK.log; echo hello; rm -f $log; if [ $RANK = 0 ]; then "
                         "mkfifo $log; else ln -s /dev/zero $log; fi']\n"
                         "cluster: {processes_per_host: 2}\n";
  const Outcome train =
      HeftProcess(kHeft, {"train", spec}, dir.path() + "/train", env).wait(seconds(30));
  ASSERT_EQ(train.exit_code, 0) << describe(train);
  std::ofstream(dir.path() + "/plain.yaml")
      << "name: plain\nentry_point: [/bin/sh, -c, 'echo hello from a plain job']\n";
  const Outcome plain =
      HeftProcess(kHeft, {"train", dir.path() + "/plain.yaml"}, dir.path() + "/plain", env)
          .wait(seconds(30));
  ASSERT_EQ(plain.exit_code, 0) << describe(plain);

  HeftProcess console(kHeft, {"console", "--port", "0"}, dir.path() + "/console", env);
  const int port = console_port(dir.path() + "/console.out");
  ASSERT_GT(port, 0) << read_file(dir.path() + "/console.err");

  std::vector<Reply> replies(64);
  std::vector<std::thread> clients;
  for (Reply& r : replies)
    clients.emplace_back([&r, port] { r = get(port, "/api/jobs/vandal/logs?rank=0&offset=-1"); });
  for (std::thread& t : clients) t.join();
  for (const Reply& r : replies) {
    EXPECT_EQ(r.status, 409) << r.body;
    EXPECT_LT(r.seconds, 4.0);  // the deadline is 2 s; a FIFO is refused at once
    EXPECT_EQ(nlohmann::json::parse(r.body, nullptr, false).value("error", ""),
              jobdir + "/logs/rank-0.log is a FIFO, not a regular file: not read");
  }

  const Reply list = get(port, "/api/jobs", 2000);
  EXPECT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(nlohmann::json::parse(list.body)["jobs"].size(), 2u);
  const Reply link = get(port, "/api/jobs/vandal/logs?rank=1&offset=0", 2000);
  EXPECT_EQ(link.status, 409) << link.body;
  EXPECT_NE(link.body.find("rank-1.log is a symbolic link, not a regular file"), std::string::npos)
      << link.body;
  const Reply normal = get(port, "/api/jobs/plain/logs?rank=0&offset=-1", 2000);
  ASSERT_EQ(normal.status, 200) << normal.body;
  const nlohmann::json window = nlohmann::json::parse(normal.body);
  EXPECT_EQ(window["text"], "hello from a plain job\n");
  EXPECT_EQ(window["offset"], 23);
  EXPECT_EQ(window["size"], 23);
  // The job's page opens on a rank whose log is a regular file (none here: rank 0).
  const Reply details = get(port, "/api/jobs/vandal", 2000);
  EXPECT_EQ(details.status, 200) << details.body;
  EXPECT_EQ(nlohmann::json::parse(details.body)["log_rank"], 0);

  ::kill(console.pid(), SIGTERM);
  const Outcome ended = console.wait(seconds(10));
  EXPECT_EQ(ended.exit_code, 0) << describe(ended);
}

TEST(ConsoleJobFiles, ALogReadPastTheRequestsDeadlineGets503) {
  TempDir dir;
  const std::string spec = dir.path() + "/plain.yaml";
  std::ofstream(spec) << "name: plain\nentry_point: [/bin/sh, -c, 'echo hello']\n";
  const Outcome train = HeftProcess(kHeft, {"train", spec}, dir.path() + "/train",
                                    {{"HEFT_HOME", dir.path() + "/home"}})
                            .wait(seconds(30));
  ASSERT_EQ(train.exit_code, 0) << describe(train);
  heft::profile::ConsoleOptions o;
  o.home = dir.path() + "/home";
  o.port = 0;
  o.token = kToken;
  o.limits.file_read_s = 0;  // every read of a byte is past its deadline
  heft::profile::ConsoleServer server(o);
  const int port = server.bind();
  std::thread serving([&server] { server.serve(); });
  const Reply late = get(port, "/api/jobs/plain/logs?rank=0&offset=0", 2000);
  EXPECT_EQ(late.status, 503) << late.body;
  EXPECT_NE(late.body.find("rank-0.log: reading took longer than its deadline"), std::string::npos)
      << late.body;
  const Reply list = get(port, "/api/jobs", 2000);
  EXPECT_EQ(list.status, 200) << list.body;
  server.stop();
  serving.join();
}

}  // namespace
