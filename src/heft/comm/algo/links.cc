#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void Links::send(int peer, const void* data, size_t bytes) {
  Transfer t = Transfer::send(peer, data, bytes);
  transport.exchange(&t, 1, deadline, op);
}

void Links::recv(int peer, void* data, size_t bytes) {
  Transfer t = Transfer::recv(peer, data, bytes);
  transport.exchange(&t, 1, deadline, op);
}

void Links::sendrecv(int to, const void* sdata, size_t sbytes, int from, void* rdata,
                     size_t rbytes, const std::function<void(size_t)>& on_recv) {
  Transfer t[2] = {Transfer::send(to, sdata, sbytes), Transfer::recv(from, rdata, rbytes)};
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
