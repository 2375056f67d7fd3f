// The TCP transport: a full mesh of authenticated connections (pair.h) among the ranks of
// one group, set up through the rendezvous store, and exchange() over them with poll().
//
// Rendezvous: each rank listens on `bind_address`, port 0, and publishes "host:port" under
// "<group>/tcp/<rank>". Rank r connects to every lower rank and accepts every higher one;
// the accepting runs on a second thread so set-up does not serialise along the ranks.
// Deliberately left out: multiple connections per pair, reconnecting.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/store/store.h"
#include "heft/comm/transport/tcp/pair.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm::tcp {

struct ContextOptions {
  // Where this rank listens for its peers. Default loopback; multi-host jobs pass the
  // address of the interface that reaches the other hosts (init.h does).
  std::string bind_address = "127.0.0.1";
  // SO_SNDBUF / SO_RCVBUF per connection: larger buffers keep a ring step in flight.
  int socket_buffer_bytes = 4 << 20;
};

class Context : public Transport {
 public:
  // Builds the mesh; blocks until every peer is connected. `group` must be the same on all
  // ranks and unique per group (it prefixes the store keys and binds the handshakes).
  // Throws heft::Timeout naming the missing peers, heft::IoError on socket failures.
  static std::unique_ptr<Context> create(Store& store, const std::string& group, int rank,
                                         int size, const std::string& token,
                                         const ContextOptions& options, Deadline deadline);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(pairs_.size()); }
  void exchange(Transfer* transfers, size_t n, Deadline deadline, const std::string& op) override;
  void check_link(int peer, const std::string& op) override;
  void abort() override;

 private:
  Context(int rank, std::vector<Pair> pairs) : rank_(rank), pairs_(std::move(pairs)) {}
  // One non-blocking pass over the transfers; returns whether any bytes moved.
  bool progress(Transfer* transfers, size_t n, const std::string& op);
  [[noreturn]] void throw_timeout(Transfer* transfers, size_t n, const std::string& op);

  int rank_;
  std::vector<Pair> pairs_;  // indexed by peer rank; pairs_[rank_] unused
  std::atomic<bool> aborted_{false};
};

}  // namespace heft::comm::tcp
