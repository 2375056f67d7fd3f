// Multi-process test harness: real ranks as forked processes on loopback, with a real
// TcpStoreServer in a process of its own (so the test process never forks while it has
// threads). A rank's body reports failure by throwing; the parent sees exit codes.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/communicator.h"
#include "heft/comm/store/store.h"

namespace heft::test {

// A TcpStoreServer running in a child process; killed and reaped on destruction.
class StoreProcess {
 public:
  explicit StoreProcess(std::string token = "test-token");
  ~StoreProcess();
  int port() const { return port_; }
  const std::string& token() const { return token_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // A new client of this store (call in a rank process, after fork).
  std::shared_ptr<comm::Store> connect() const;

 private:
  std::string token_;
  int pid_ = -1;
  int port_ = 0;
};

struct RankExit {
  int rank = -1;
  int exit_code = -1;  // 0 = the body returned; 1 = it threw (message on stderr)
  int signal = 0;      // non-zero when killed by a signal
  double seconds = 0;  // from start to exit, as seen by the parent
};

struct RunResult {
  std::vector<RankExit> ranks;
  bool timed_out = false;  // the parent had to kill ranks at the deadline
  bool all_ok() const;
  std::string summary() const;  // one line per rank, for assertion messages
};

// Forks `n` processes running body(rank); waits for all of them, killing every one still
// alive after `timeout`.
RunResult run_ranks(int n, const std::function<void(int rank)>& body,
                    std::chrono::seconds timeout = std::chrono::seconds(120));

// run_ranks where each rank first joins a world communicator of size n through `store`.
// hosts[r], when given, is rank r's host name (ranks with the same name share memory).
RunResult run_world(int n, const StoreProcess& store,
                    const std::function<void(comm::Communicator& comm)>& body,
                    comm::CommunicatorOptions options = {},
                    std::chrono::seconds timeout = std::chrono::seconds(120),
                    std::vector<std::string> hosts = {});

// Host names for n ranks split into `host_count` simulated hosts, the first hosts one rank
// smaller when n does not divide (7 ranks on 2 hosts: 3 + 4).
std::vector<std::string> split_hosts(int n, int host_count);

// Throws heft::Error with `message` when cond is false (use inside rank bodies).
void expect(bool cond, const std::string& message);

}  // namespace heft::test
