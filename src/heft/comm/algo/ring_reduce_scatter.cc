#include "heft/comm/algo/ring_reduce_scatter.h"

#include <cstring>
#include <vector>

#include "heft/comm/reduce.h"

namespace heft::comm::algo {

void ring_reduce_scatter(Links& links, const void* send, void* recv, size_t recv_count,
                         DataType t, ReduceOp op) {
  const int n = links.size(), r = links.rank();
  const size_t es = element_size(t), chunk_bytes = recv_count * es;
  const auto* src = static_cast<const uint8_t*>(send);
  if (n == 1 || recv_count == 0) {
    if (recv != send) std::memmove(recv, send, chunk_bytes);
    finish_average(recv, recv_count, t, op, n);
    return;
  }
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  std::vector<uint8_t> cur(chunk_bytes), next(chunk_bytes);
  for (int s = 0; s < n - 1; ++s) {
    const uint8_t* out = s == 0 ? src + mod(r - 1, n) * chunk_bytes : cur.data();
    const uint8_t* own = src + mod(r - s - 2, n) * chunk_bytes;
    ElementProgress fold_own(es, [&](size_t first, size_t k) {
      reduce_into(next.data() + first * es, own + first * es, k, t, op);
    });
    links.sendrecv(right, out, chunk_bytes, left, next.data(), chunk_bytes, std::ref(fold_own));
    cur.swap(next);
  }
  std::memcpy(recv, cur.data(), chunk_bytes);
  finish_average(recv, recv_count, t, op, n);
}

}  // namespace heft::comm::algo
