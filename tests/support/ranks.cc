#include "support/ranks.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "heft/comm/store/tcp_store.h"
#include "heft/error.h"

namespace heft::test {

using Clock = std::chrono::steady_clock;

StoreProcess::StoreProcess(std::string token) : token_(std::move(token)) {
  int fds[2];
  if (pipe(fds) != 0) throw IoError("pipe: " + errno_string(errno));
  pid_ = fork();
  if (pid_ == 0) {
    close(fds[0]);
    int code = 0;
    try {
      comm::TcpStoreServer server(comm::TcpStoreServerOptions{"127.0.0.1", 0, token_});
      int port = server.port();
      if (write(fds[1], &port, sizeof(port)) != sizeof(port)) _exit(3);
      close(fds[1]);
      for (;;) pause();  // until the parent kills us
    } catch (const std::exception& e) {
      std::cerr << "store process: " << e.what() << "\n";
      code = 2;
    }
    _exit(code);
  }
  close(fds[1]);
  if (read(fds[0], &port_, sizeof(port_)) != sizeof(port_)) port_ = 0;
  close(fds[0]);
  if (port_ == 0) throw IoError("test store process did not start");
}

StoreProcess::~StoreProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::shared_ptr<comm::Store> StoreProcess::connect() const {
  auto s = std::make_shared<comm::TcpStore>("127.0.0.1", port_, token_);
  s->set_timeout(std::chrono::seconds(60));
  return s;
}

bool RunResult::all_ok() const {
  if (timed_out) return false;
  for (const RankExit& r : ranks)
    if (r.exit_code != 0 || r.signal != 0) return false;
  return true;
}

std::string RunResult::summary() const {
  std::ostringstream os;
  if (timed_out) os << "(timed out) ";
  for (const RankExit& r : ranks)
    os << "[rank " << r.rank << ": exit " << r.exit_code << " signal " << r.signal << " after "
       << r.seconds << " s] ";
  return os.str();
}

RunResult run_ranks(int n, const std::function<void(int)>& body, std::chrono::seconds timeout) {
  std::fflush(nullptr);
  const auto start = Clock::now();
  std::vector<pid_t> pids(n, -1);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      int code = 0;
      try {
        body(r);
      } catch (const std::exception& e) {
        std::cerr << "rank " << r << " failed: " << e.what() << std::endl;
        code = 1;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids[r] = pid;
  }
  RunResult result;
  result.ranks.resize(n);
  int alive = n;
  while (alive > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] != pid) continue;
        RankExit& e = result.ranks[r];
        e.rank = r;
        e.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        e.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        e.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        pids[r] = -1;
        --alive;
      }
      continue;
    }
    if (Clock::now() - start > timeout) {
      result.timed_out = true;
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return result;
}

RunResult run_world(int n, const StoreProcess& store,
                    const std::function<void(comm::Communicator&)>& body,
                    comm::CommunicatorOptions options, std::chrono::seconds timeout,
                    std::vector<std::string> hosts) {
  if (options.token.empty()) options.token = store.token();
  static int world_count = 0;
  const std::string group = "test/world" + std::to_string(world_count++);
  return run_ranks(
      n,
      [&](int rank) {
        if (!hosts.empty()) options.host = hosts[rank];
        auto comm = comm::Communicator::create(store.connect(), group, rank, n, options);
        body(*comm);
      },
      timeout);
}

std::vector<std::string> split_hosts(int n, int host_count) {
  std::vector<std::string> names;
  for (int h = 0; h < host_count; ++h) {
    // Host h gets n/host_count ranks, plus one for the last n % host_count hosts.
    int ranks = n / host_count + (h >= host_count - n % host_count ? 1 : 0);
    for (int i = 0; i < ranks; ++i) names.push_back("host-" + std::to_string(h));
  }
  return names;
}

void expect(bool cond, const std::string& message) {
  if (!cond) throw Error("expectation failed: " + message);
}

}  // namespace heft::test
