// One authenticated TCP connection between two ranks of a group, and its handshake.
//
// Handshake (the lower rank listens, the higher rank connects):
//   acceptor  -> connector : nonce[32]
//   connector -> acceptor  : magic u32 "HFTP" | version u32 | group_len u32 | group bytes |
//                            from_rank u32 | to_rank u32 |
//                            mac[32] = HMAC-SHA256(token, "tcp-pair/<group>/<from>/<to>" || nonce)
//   acceptor  -> connector : status u8 (1 = accepted)
// Integers are little-endian. A connection that fails any check is closed and logged; it
// never becomes a Pair.
// Deliberately left out: reconnecting a broken pair (a lost peer ends the group).
#pragma once

#include <string>

#include "heft/comm/transport/tcp/socket.h"

namespace heft::comm::tcp {

struct PairIdentity {
  std::string group;  // the group's store prefix: unique per communicator
  std::string token;  // the job token
  int rank = -1;      // this side
};

class Pair {
 public:
  Pair() = default;
  Pair(int peer, Socket socket) : peer_(peer), socket_(std::move(socket)) {}
  int peer() const { return peer_; }
  int fd() const { return socket_.fd(); }
  bool connected() const { return socket_.valid(); }
  void shutdown() { socket_.shutdown(); }

 private:
  int peer_ = -1;
  Socket socket_;
};

// Connects to the peer listening at host:port and proves our identity. Throws
// heft::Timeout / IoError naming the peer when it cannot.
Pair connect_pair(const PairIdentity& self, int peer, const std::string& host, int port,
                  Deadline deadline);

// Accepts one connection on `listener` and checks its proof. Returns a Pair whose peer()
// is the connector's rank, or an unconnected Pair when the connection was refused (wrong
// token, wrong group, garbage: logged). Throws heft::Timeout at the deadline.
Pair accept_pair(const PairIdentity& self, const Socket& listener, int world_size,
                 Deadline deadline);

}  // namespace heft::comm::tcp
