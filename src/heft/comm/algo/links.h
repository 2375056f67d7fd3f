// What every collective algorithm is handed: the transport of its group, the operation's
// deadline and name (for error messages), and small helpers over exchange().
// Also the partition rule shared by all algorithms: `count` elements split into `parts`
// chunks, the first count % parts chunks one element longer.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "heft/comm/dtype.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm::algo {

class Links {
 public:
  // All ranks of the transport, in transport order. With a `signature` (call != 0), the
  // first message this operation sends on each link is preceded by it, and the first
  // received on each link is checked against it: a peer that made another call (another
  // count, dtype, op or root) fails the exchange with heft::InvalidArgument naming both
  // counts (call_signature.h). Every rank of the operation must pass one, or none.
  Links(Transport& transport, Deadline deadline, std::string op, CallSignature signature = {});
  // A subset: virtual rank i is transport rank members[i]; this rank must be a member.
  // Used by hierarchical algorithms (e.g. a ring among host leaders over the world mesh).
  Links(Transport& transport, Deadline deadline, std::string op, std::vector<int> members,
        CallSignature signature = {});

  Transport& transport;
  Deadline deadline;
  std::string op;  // e.g. "allreduce(ring, 1048576 B)": appears in PeerLost and Timeout

  int rank() const { return rank_ >= 0 ? rank_ : transport.rank(); }
  int size() const { return members_.empty() ? transport.size() : static_cast<int>(members_.size()); }
  // The transport rank of virtual rank v.
  int real(int v) const { return members_.empty() ? v : members_[v]; }

  // Peers below are virtual ranks.
  void send(int peer, const void* data, size_t bytes);
  void recv(int peer, void* data, size_t bytes);
  // Sends to `to` and receives from `from` at the same time (a ring step). on_recv, when
  // set, is called with the bytes received so far as they arrive.
  void sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata, size_t rbytes,
                const std::function<void(size_t)>& on_recv = nullptr);
  // transport.exchange() with the signature headers of first contacts (peers in the
  // transfers are transport ranks).
  void exchange(Transfer* transfers, size_t n);

 private:
  std::vector<int> members_;
  int rank_ = -1;
  CallSignature signature_;
  // By transport rank: whether this operation sent to / received from that peer yet.
  std::vector<uint8_t> sent_, received_;
};

struct Range {
  size_t offset = 0;  // in elements
  size_t count = 0;
};

// Chunk i of `count` elements split into `parts` (see the file comment).
Range chunk_range(size_t count, int parts, int i);

// (a mod n) for possibly negative a.
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Calls reduce(first, n) on whole elements as bytes arrive: turns a byte-progress callback
// into element ranges, so a receiver reduces while the rest is still in flight.
class ElementProgress {
 public:
  ElementProgress(size_t elem_size, std::function<void(size_t first, size_t n)> reduce)
      : elem_size_(elem_size), reduce_(std::move(reduce)) {}
  void operator()(size_t bytes_done) {
    size_t whole = bytes_done / elem_size_;
    if (whole > reduced_) {
      reduce_(reduced_, whole - reduced_);
      reduced_ = whole;
    }
  }

 private:
  size_t elem_size_;
  std::function<void(size_t, size_t)> reduce_;
  size_t reduced_ = 0;
};

}  // namespace heft::comm::algo
