// The transport interface the collective algorithms run on: a set of point-to-point links
// from this rank to every other rank of one group, and one primitive, exchange(), that moves
// several sends and receives at once until all are done. Ordering: transfers to the same
// peer in the same direction complete in the order given, and successive exchange() calls
// keep that order on each link (a link is a FIFO byte stream).
// Implementations: tcp/context.h (sockets). Shared memory arrives behind the same interface.
// Deliberately left out: tags and matching (callers agree on the order of transfers).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace heft::comm {

using Deadline = std::chrono::steady_clock::time_point;

// The milliseconds left until `deadline`, at least 1: the timeout of a store wait that must
// end by it.
inline std::chrono::milliseconds time_left(Deadline deadline) {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now()));
}

// What a rank called a collective with (algo/call_signature.h makes one): `call` encodes the
// collective, dtype, op, root and count, equal on ranks that made the same call, never 0;
// `count` is the element count, named in the error when two ranks' counts differ.
struct CallSignature {
  uint64_t call = 0;
  uint64_t count = 0;
};

// The error text when rank `them`'s call of `op` (count `their_count`, signature other than
// `mine`) differs from this rank's (`me`).
inline std::string call_mismatch(int me, const std::string& op, int them, uint64_t their_count,
                                 const CallSignature& mine) {
  return "rank " + std::to_string(me) + ": " + op + ": rank " + std::to_string(them) +
         " called " +
         (their_count != mine.count
              ? "it with " + std::to_string(their_count) + " elements, this rank with " +
                    std::to_string(mine.count)
              : std::string("another collective, or this one with another dtype, op or root")) +
         " (every rank must make the same collective calls, with the same sizes, in the same "
         "order)";
}

struct Transfer {
  enum class Kind { send, recv };
  Kind kind = Kind::send;
  int peer = -1;
  void* data = nullptr;  // send: read from; recv: written to
  size_t bytes = 0;
  // Send only: send at most *limit bytes so far (the data after it is not ready yet); the
  // limit may grow while the exchange runs (it is re-read after every receive progress).
  const size_t* limit = nullptr;
  // Recv only: called with the total bytes received so far, each time more arrive.
  std::function<void(size_t)> on_progress;
  // Progress so far; the transport updates it.
  size_t done = 0;

  static Transfer send(int peer, const void* data, size_t bytes) {
    Transfer t;
    t.kind = Kind::send;
    t.peer = peer;
    t.data = const_cast<void*>(data);
    t.bytes = bytes;
    return t;
  }
  static Transfer recv(int peer, void* data, size_t bytes) {
    Transfer t;
    t.kind = Kind::recv;
    t.peer = peer;
    t.data = data;
    t.bytes = bytes;
    return t;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Moves every transfer to completion, concurrently, or throws: heft::PeerLost (peer
  // closed, naming it and `op`), heft::Timeout (deadline passed, naming the peer waited on
  // and the bytes missing). Transfers to self are not allowed. Not thread-safe: one
  // exchange at a time per transport.
  virtual void exchange(Transfer* transfers, size_t n, Deadline deadline,
                        const std::string& op) = 0;

  // Throws heft::PeerLost naming `peer` and `op` when its link has been closed by the peer
  // (it died or gave up). Never blocks.
  virtual void check_link(int peer, const std::string& op) = 0;

  // Breaks every link at once so that peers blocked on this rank see the loss now rather
  // than at their deadline. Thread-safe; later exchanges fail.
  virtual void abort() = 0;
};

}  // namespace heft::comm
