#include "heft/comm/algo/shm_collectives.h"

#include <algorithm>
#include <cstring>

#include "heft/comm/copy.h"
#include "heft/comm/reduce.h"

namespace heft::comm::algo {

void shm_reduce_scatter(ShmLinks& links, const void* send, void* recv, size_t recv_count,
                        DataType t, ReduceOp op, int world_size) {
  const size_t es = element_size(t);
  const int n = links.size(), r = links.rank();
  // Each chunk carries the same m-element piece of all n blocks.
  const size_t per_chunk = std::max<size_t>(1, links.ctx.chunk_bytes() / (es * n));
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  for (size_t first = 0; first < recv_count; first += per_chunk) {
    const size_t m = std::min(per_chunk, recv_count - first);
    const int s = links.ctx.next_slot();
    for (int j = 0; j < n; ++j)
      copy_bytes(links.ctx.in(r, s) + j * m * es, src + (j * recv_count + first) * es, m * es);
    links.sync();
    uint8_t* out = dst + first * es;
    if (n == 1) copy_bytes(out, links.ctx.in(0, s) + r * m * es, m * es);
    else reduce_to(out, links.ctx.in(0, s) + r * m * es, links.ctx.in(1, s) + r * m * es, m, t, op);
    for (int p = 2; p < n; ++p) reduce_into(out, links.ctx.in(p, s) + r * m * es, m, t, op);
    finish_average(out, m, t, op, world_size);
  }
}

void shm_allgather(ShmLinks& links, const void* send, void* recv, size_t send_count, DataType t) {
  const size_t es = element_size(t);
  const int n = links.size(), r = links.rank();
  const size_t per_chunk = links.ctx.chunk_bytes() / es;
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  for (size_t first = 0; first < send_count; first += per_chunk) {
    const size_t m = std::min(per_chunk, send_count - first);
    const int s = links.ctx.next_slot();
    copy_bytes(links.ctx.in(r, s), src + first * es, m * es);
    links.sync();
    for (int p = 0; p < n; ++p)
      copy_bytes(dst + (p * send_count + first) * es, links.ctx.in(p, s), m * es);
  }
}

void shm_broadcast(ShmLinks& links, void* buf, size_t bytes, int root) {
  auto* data = static_cast<uint8_t*>(buf);
  const size_t chunk = links.ctx.chunk_bytes();
  for (size_t first = 0; first < bytes; first += chunk) {
    const size_t m = std::min(chunk, bytes - first);
    const int s = links.ctx.next_slot();
    if (links.rank() == root) copy_bytes(links.ctx.in(root, s), data + first, m);
    links.sync();
    if (links.rank() != root) copy_bytes(data + first, links.ctx.in(root, s), m);
  }
}

void shm_reduce(ShmLinks& links, const void* send, void* recv, size_t count, DataType t,
                ReduceOp op, int root, int world_size) {
  const size_t es = element_size(t);
  const size_t per_chunk = links.ctx.chunk_bytes() / es;
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  const bool is_root = links.rank() == root;
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t m = std::min(per_chunk, count - first);
    const int s = links.ctx.next_slot();
    // The root reads its own part from its buffer: only the others copy into their slots.
    if (!is_root) copy_bytes(links.ctx.in(links.rank(), s), src + first * es, m * es);
    links.sync();
    if (!is_root) continue;
    auto part = [&](int p) -> const uint8_t* {
      return p == root ? src + first * es : links.ctx.in(p, s);
    };
    uint8_t* out = dst + first * es;
    reduce_to(out, part(0), part(1), m, t, op);
    for (int p = 2; p < links.size(); ++p) reduce_into(out, part(p), m, t, op);
    finish_average(out, m, t, op, world_size);
  }
}

}  // namespace heft::comm::algo
