// ctest-labels: multiproc
// The TCP store between real processes on loopback. Every fork happens while the test
// process has a single thread (before any server or client thread exists), and children
// only use objects they create themselves, then _exit. Children learn the server's port
// through a pipe, and die with their parent (PR_SET_PDEATHSIG) so none outlives a failed
// test.
// Deliberately left out: multi-host runs (network namespaces belong to the launcher tests).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"

namespace heft::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

const std::string kToken = "multiproc-token";

double seconds_since(steady_clock::time_point t0) {
  return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

// A one-way pipe carrying ports (4 bytes each: one write is one atomic message).
struct PortPipe {
  int fds[2] = {-1, -1};
  PortPipe() { EXPECT_EQ(::pipe(fds), 0); }
  ~PortPipe() {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  }
  void send(int port) { EXPECT_EQ(::write(fds[1], &port, sizeof(port)), 4); }
  // The next port, or -1 if none arrives within 60 s.
  int receive() {
    pollfd p{fds[0], POLLIN, 0};
    int port = -1;
    if (::poll(&p, 1, 60000) != 1 || ::read(fds[0], &port, sizeof(port)) != 4) return -1;
    return port;
  }
};

// Runs body in a child process; its return value (2 on an exception) is the exit status.
pid_t fork_child(const std::function<int()>& body) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::alarm(120);  // never outlive a stuck test by long
  int rc = 2;
  try {
    rc = body();
  } catch (const std::exception& e) {
    fprintf(stderr, "child %d: %s\n", static_cast<int>(::getpid()), e.what());
  }
  ::_exit(rc);
}

// The child's exit status, or -1 (after killing it) if it did not exit within `limit`.
int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto t0 = steady_clock::now();
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (steady_clock::now() - t0 > limit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
}

TEST(TcpStoreMultiprocTest, ForkedProcessesMeetAndAddToTheExactCount) {
  constexpr int kChildren = 7;
  constexpr int kAddsEach = 150;
  PortPipe pipe;
  std::vector<pid_t> children;
  for (int i = 0; i < kChildren; ++i) {
    children.push_back(fork_child([&pipe, i] {
      int port = pipe.receive();
      if (port < 0) return 3;
      TcpStore store("127.0.0.1", port, kToken, std::chrono::seconds(30));
      store.set("arrived/" + std::to_string(i), std::string("1"));
      std::vector<std::string> everyone;
      for (int j = 0; j < kChildren; ++j) everyone.push_back("arrived/" + std::to_string(j));
      store.wait(everyone, std::chrono::seconds(30));  // all adds overlap
      for (int j = 0; j < kAddsEach; ++j) store.add("counter", 1);
      return 0;
    }));
  }
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, kToken});
  for (int i = 0; i < kChildren; ++i) pipe.send(server.port());
  for (pid_t pid : children) EXPECT_EQ(wait_exit(pid, std::chrono::seconds(60)), 0);
  TcpStore store("127.0.0.1", server.port(), kToken);
  EXPECT_EQ(store.add("counter", 0), kChildren * kAddsEach);
  EXPECT_EQ(server.refused_connections(), 0);
}

TEST(TcpStoreMultiprocTest, KilledServerProcessGivesPeerLostNotAHang) {
  PortPipe pipe;
  pid_t server_pid = fork_child([&pipe] {
    TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, kToken});
    pipe.send(server.port());
    for (;;) ::pause();  // until killed
    return 0;
  });
  const int port = pipe.receive();
  ASSERT_GT(port, 0);
  TcpStore store("127.0.0.1", port, kToken);
  store.set("k", std::string("v"));
  TcpStore waiter("127.0.0.1", port, kToken);
  bool got_peer_lost = false;
  std::thread blocked([&] {
    try {
      waiter.get("never", milliseconds(60000));
    } catch (const PeerLost&) {
      got_peer_lost = true;
    }
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto t0 = steady_clock::now();
  ::kill(server_pid, SIGKILL);
  blocked.join();
  EXPECT_TRUE(got_peer_lost);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_THROW(store.get_string("k"), PeerLost);
  EXPECT_EQ(wait_exit(server_pid, std::chrono::seconds(10)), 128 + SIGKILL);
}

TEST(TcpStoreMultiprocTest, KilledClientProcessLeavesTheServerServing) {
  PortPipe pipe;
  pid_t client_pid = fork_child([&pipe] {
    int port = pipe.receive();
    TcpStore store("127.0.0.1", port, kToken);
    store.set("child-up", std::string("1"));
    store.wait({"never"}, std::chrono::seconds(100));  // parked until killed
    return 0;
  });
  TcpStoreServer server(TcpStoreServerOptions{"127.0.0.1", 0, kToken});
  pipe.send(server.port());
  TcpStore store("127.0.0.1", server.port(), kToken);
  store.wait({"child-up"}, std::chrono::seconds(30));
  ::kill(client_pid, SIGKILL);
  EXPECT_EQ(wait_exit(client_pid, std::chrono::seconds(10)), 128 + SIGKILL);
  store.set("never", std::string("now"));  // would answer the dead child's parked wait
  EXPECT_EQ(store.add("n", 1), 1);
  EXPECT_EQ(store.get_string("never"), "now");
}

}  // namespace
}  // namespace heft::comm
