#include "heft/comm/algo/chain_broadcast.h"

namespace heft::comm::algo {

void chain_broadcast(Links& links, void* buf, size_t bytes, int root) {
  const int n = links.size();
  if (n == 1 || bytes == 0) return;
  const int v = mod(links.rank() - root, n);
  const int prev = mod(links.rank() - 1, n), next = mod(links.rank() + 1, n);
  if (v == 0) {
    links.send(next, buf, bytes);
    return;
  }
  if (v == n - 1) {
    links.recv(prev, buf, bytes);
    return;
  }
  size_t received = 0;
  Transfer t[2] = {Transfer::recv(links.real(prev), buf, bytes),
                   Transfer::send(links.real(next), buf, bytes)};
  t[0].on_progress = [&](size_t done) { received = done; };
  t[1].limit = &received;  // forward only what has arrived
  links.exchange(t, 2);
}

}  // namespace heft::comm::algo
