#include "heft/comm/algo/ring_allreduce.h"

#include <vector>

#include "heft/comm/reduce.h"

namespace heft::comm::algo {

void ring_allreduce(Links& links, void* buf, size_t count, DataType t, ReduceOp op) {
  const int n = links.size(), r = links.rank();
  if (n == 1 || count == 0) {
    finish_average(buf, count, t, op, n);
    return;
  }
  const size_t es = element_size(t);
  auto* data = static_cast<uint8_t*>(buf);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  std::vector<uint8_t> incoming(chunk_range(count, n, 0).count * es);

  // Reduce-scatter: after step n-2, chunk r+1 holds the reduction over all ranks.
  for (int s = 0; s < n - 1; ++s) {
    const Range out = chunk_range(count, n, mod(r - s, n));
    const Range in = chunk_range(count, n, mod(r - s - 1, n));
    uint8_t* dst = data + in.offset * es;
    ElementProgress reduce_as_it_arrives(es, [&](size_t first, size_t k) {
      reduce_into(dst + first * es, incoming.data() + first * es, k, t, op);
    });
    links.sendrecv(right, data + out.offset * es, out.count * es, left, incoming.data(),
                   in.count * es, std::ref(reduce_as_it_arrives));
  }
  const Range own = chunk_range(count, n, mod(r + 1, n));
  finish_average(data + own.offset * es, own.count, t, op, n);

  // Allgather: forward the finished chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const Range out = chunk_range(count, n, mod(r + 1 - s, n));
    const Range in = chunk_range(count, n, mod(r - s, n));
    links.sendrecv(right, data + out.offset * es, out.count * es, left, data + in.offset * es,
                   in.count * es);
  }
}

}  // namespace heft::comm::algo
