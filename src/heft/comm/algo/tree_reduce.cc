#include "heft/comm/algo/tree_reduce.h"

#include <cstring>
#include <vector>

#include "heft/comm/reduce.h"

namespace heft::comm::algo {

void tree_reduce(Links& links, const void* send, void* recv, size_t count, DataType t,
                 ReduceOp op, int root) {
  const int n = links.size();
  const size_t bytes = count * element_size(t);
  const int v = mod(links.rank() - root, n);
  auto real = [&](int vr) { return mod(vr + root, n); };
  std::vector<uint8_t> scratch;
  void* acc = recv;  // root accumulates in place in recv
  if (v != 0) {
    scratch.resize(bytes);
    acc = scratch.data();
  }
  if (acc != send) std::memmove(acc, send, bytes);
  if (n > 1 && count > 0) {
    std::vector<uint8_t> incoming(bytes);
    for (int mask = 1; mask < n; mask <<= 1) {
      if (v & mask) {
        links.send(real(v - mask), acc, bytes);
        break;
      }
      if (v + mask < n) {
        links.recv(real(v + mask), incoming.data(), bytes);
        reduce_into(acc, incoming.data(), count, t, op);
      }
    }
  }
  if (v == 0) finish_average(acc, count, t, op, n);
}

}  // namespace heft::comm::algo
