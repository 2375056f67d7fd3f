#include "heft/comm/algo/links.h"

#include <algorithm>

#include "heft/check.h"

namespace heft::comm::algo {

Links::Links(Transport& transport, Deadline deadline, std::string op, std::vector<int> members)
    : transport(transport), deadline(deadline), op(std::move(op)), members_(std::move(members)) {
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i] == transport.rank()) rank_ = static_cast<int>(i);
  HEFT_CHECK(rank_ >= 0, "rank ", transport.rank(), " is not among the members of ", this->op);
}

void Links::send(int peer, const void* data, size_t bytes) {
  Transfer t = Transfer::send(real(peer), data, bytes);
  transport.exchange(&t, 1, deadline, op);
}

void Links::recv(int peer, void* data, size_t bytes) {
  Transfer t = Transfer::recv(real(peer), data, bytes);
  transport.exchange(&t, 1, deadline, op);
}

void Links::sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata,
                     size_t rbytes, const std::function<void(size_t)>& on_recv) {
  Transfer t[2] = {Transfer::send(real(to), sdata, sbytes),
                   Transfer::recv(real(from), rdata, rbytes)};
  t[1].on_progress = on_recv;
  transport.exchange(t, 2, deadline, op);
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
