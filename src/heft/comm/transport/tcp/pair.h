// One authenticated TCP connection between two ranks of a group, and its handshake, in which
// each side proves the job token to the other.
//
// Handshake, version 2 (the lower rank listens, the higher rank connects; `address` is the
// "host:port" the listener published, signed, in the store (store/signed_value.h), and the
// connector dialled):
//   acceptor  -> connector : nonce_a[32]
//   connector -> acceptor  : magic u32 "HFTP" | version u32 (2) | group_len u32 | group bytes |
//                            from_rank u32 | to_rank u32 | nonce_c[32] |
//                            mac_c[32] = HMAC-SHA256(token, "tcp-pair/connect/<group>/<from>/<to>/
//                                        <address>" || 0x00 || nonce_a || nonce_c)
//   acceptor  -> connector : status u8 (1 = accepted) | mac_a[32] = HMAC-SHA256(token,
//                            "tcp-pair/accept/<group>/<from>/<to>/<address>" || 0x00 || nonce_a ||
//                            nonce_c), sent only when accepted
// Integers are little-endian. Both proofs cover both nonces, so neither replays; both cover the
// address the listener published, so a relay that got a connector to dial it (by rewriting the
// address in an unauthenticated store, which the signature already refuses) fails the
// acceptor's check. A connection that fails any check is closed and its refusal logged
// (refusal_log.h); it never becomes a Pair. Frames after the handshake carry no MAC: see
// docs/security.md for what that leaves to the network.
// Deliberately left out: reconnecting a broken pair (a lost peer ends the group).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "heft/comm/transport/tcp/socket.h"

namespace heft::comm::tcp {

struct PairIdentity {
  std::string group;    // the group's store prefix: unique per communicator
  std::string token;    // the job token
  int rank = -1;        // this side
  std::string address;  // "host:port" this rank listens on, as published
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

// How long one accepted connection may take to complete its handshake: a peer sends its half
// as soon as it reads the nonce, so this only bounds what a silent or slow connection costs.
constexpr std::chrono::seconds kHandshakeWait{5};
// Handshakes in progress at once on one listener; past it the oldest is dropped.
constexpr size_t kMaxPendingHandshakes = 512;

// Connects to `peer` listening at `address` ("host:port"), proves our identity and checks the
// peer's proof. Throws heft::Timeout / IoError naming the peer when it cannot connect, when
// the peer refuses, or when the peer does not prove the job token (an impersonation or a relay).
Pair connect_pair(const PairIdentity& self, int peer, const std::string& address,
                  Deadline deadline);

// Accepts on `listener` until every rank in (self.rank, world_size) has connected and proved
// itself, handshaking with all pending connections at once (each within kHandshakeWait), so
// silent connections cannot hold up the peers. Returns the pairs indexed by peer rank
// (unconnected below self.rank and at it). Refused connections are logged and counted
// (refusal_log.h). Throws heft::Timeout naming the missing ranks at the deadline, heft::IoError
// when the listener fails or was shut down.
std::vector<Pair> accept_peers(const PairIdentity& self, const Socket& listener, int world_size,
                               Deadline deadline);

}  // namespace heft::comm::tcp
