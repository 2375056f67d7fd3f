#include "heft/comm/algo/links.h"

#include <algorithm>

#include "heft/check.h"
#include "heft/error.h"

namespace heft::comm::algo {

namespace {

// What precedes the first message of an operation on a link (Links' signature).
struct CallHeader {
  uint64_t magic = 0x6c6c61637466656eull;  // "heftcall", little-endian
  uint64_t call = 0;
  uint64_t count = 0;
};

}  // namespace

Links::Links(Transport& transport, Deadline deadline, std::string op, CallSignature signature)
    : transport(transport), deadline(deadline), op(std::move(op)), signature_(signature) {
  if (signature_.call) {
    sent_.assign(static_cast<size_t>(transport.size()), 0);
    received_.assign(static_cast<size_t>(transport.size()), 0);
  }
}

Links::Links(Transport& transport, Deadline deadline, std::string op, std::vector<int> members,
             CallSignature signature)
    : Links(transport, deadline, std::move(op), signature) {
  members_ = std::move(members);
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i] == transport.rank()) rank_ = static_cast<int>(i);
  HEFT_CHECK(rank_ >= 0, "rank ", transport.rank(), " is not among the members of ", this->op);
}

void Links::exchange(Transfer* ts, size_t n) {
  bool first_contact = false;
  for (size_t i = 0; i < n && signature_.call; ++i) {
    const auto peer = static_cast<size_t>(ts[i].peer);
    first_contact |= !(ts[i].kind == Transfer::Kind::send ? sent_[peer] : received_[peer]);
  }
  if (!first_contact) return transport.exchange(ts, n, deadline, op);
  // Headers go first on their links (a link is FIFO), so a mismatch is seen before any
  // payload is taken for this operation's.
  const CallHeader out{CallHeader{}.magic, signature_.call, signature_.count};
  std::vector<CallHeader> in(n);
  std::vector<Transfer> all;
  all.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const int peer = ts[i].peer;
    if (ts[i].kind == Transfer::Kind::send) {
      if (!sent_[static_cast<size_t>(peer)]) all.push_back(Transfer::send(peer, &out, sizeof(out)));
      sent_[static_cast<size_t>(peer)] = 1;
    } else if (!received_[static_cast<size_t>(peer)]) {
      received_[static_cast<size_t>(peer)] = 1;
      in[i].magic = 0;
      Transfer header = Transfer::recv(peer, &in[i], sizeof(CallHeader));
      header.on_progress = [this, &h = in[i], peer](size_t got) {
        if (got < sizeof(CallHeader)) return;
        if (h.magic == CallHeader{}.magic && h.call == signature_.call) return;
        throw InvalidArgument(call_mismatch(transport.rank(), op, peer,
                                            h.magic == CallHeader{}.magic ? h.count : 0,
                                            signature_));
      };
      all.push_back(std::move(header));
    }
    all.push_back(ts[i]);
  }
  transport.exchange(all.data(), all.size(), deadline, op);
}

void Links::send(int peer, const void* data, size_t bytes) {
  Transfer t = Transfer::send(real(peer), data, bytes);
  exchange(&t, 1);
}

void Links::recv(int peer, void* data, size_t bytes) {
  Transfer t = Transfer::recv(real(peer), data, bytes);
  exchange(&t, 1);
}

void Links::sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata,
                     size_t rbytes, const std::function<void(size_t)>& on_recv) {
  Transfer t[2] = {Transfer::send(real(to), sdata, sbytes),
                   Transfer::recv(real(from), rdata, rbytes)};
  t[1].on_progress = on_recv;
  exchange(t, 2);
}

Range chunk_range(size_t count, int parts, int i) {
  const size_t p = static_cast<size_t>(parts);
  const size_t base = count / p, extra = count % p, idx = static_cast<size_t>(i);
  Range r;
  r.count = base + (idx < extra ? 1 : 0);
  r.offset = idx * base + std::min(idx, extra);
  return r;
}

}  // namespace heft::comm::algo
