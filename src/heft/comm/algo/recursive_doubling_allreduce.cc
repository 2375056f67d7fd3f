#include "heft/comm/algo/recursive_doubling_allreduce.h"

#include <vector>

#include "heft/comm/reduce.h"

namespace heft::comm::algo {

void recursive_doubling_allreduce(Links& links, void* buf, size_t count, DataType t,
                                  ReduceOp op) {
  const int n = links.size(), r = links.rank();
  const size_t bytes = count * element_size(t);
  if (n == 1 || count == 0) {
    finish_average(buf, count, t, op, n);
    return;
  }
  int p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const int rem = n - p2;  // ranks below 2*rem fold in pairs first
  std::vector<uint8_t> incoming(bytes);

  int vrank;  // rank among the p2 participants, -1 when folded away
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      links.send(r + 1, buf, bytes);
      vrank = -1;
    } else {
      links.recv(r - 1, incoming.data(), bytes);
      reduce_into(buf, incoming.data(), count, t, op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  if (vrank >= 0) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      const int vpeer = vrank ^ mask;
      const int peer = vpeer < rem ? vpeer * 2 + 1 : vpeer + rem;
      links.sendrecv(peer, buf, bytes, peer, incoming.data(), bytes);
      reduce_into(buf, incoming.data(), count, t, op);
    }
  }
  if (r < 2 * rem) {
    if (r % 2 == 1) links.send(r - 1, buf, bytes);
    else links.recv(r + 1, buf, bytes);
  }
  finish_average(buf, count, t, op, n);
}

}  // namespace heft::comm::algo
