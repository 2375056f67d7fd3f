#include "heft/comm/algo/shm_allreduce.h"

#include <algorithm>
#include <cstring>

#include "heft/comm/algo/links.h"
#include "heft/comm/reduce.h"

namespace heft::comm::algo {

namespace {

// dst = in[0] op in[1] op ... (the slot's in areas, from offset_bytes) in local-rank order.
void reduce_all(ShmLinks& links, uint8_t* dst, size_t offset_bytes, size_t count, DataType t,
                ReduceOp op, int slot) {
  auto area = [&](int p) { return links.ctx.in(p, slot) + offset_bytes; };
  std::memcpy(dst, area(0), count * element_size(t));
  for (int p = 1; p < links.size(); ++p) reduce_into(dst, area(p), count, t, op);
}

// Single-copy form (cross-memory attach): no slots. Each rank reduces its 1/n slice by
// reading the peers' buffers directly, a cache-sized piece at a time; then copies every
// other rank's finished slice straight out of that rank's buffer. Three syncs per call,
// whatever the size: buffers published / slices reduced / everyone done reading.
void cma_allreduce(ShmLinks& links, uint8_t* data, size_t count, DataType t, ReduceOp op,
                   int world_size, const std::function<void(uint8_t*, size_t)>& on_slice) {
  const size_t es = element_size(t);
  const int n = links.size(), r = links.rank();
  const size_t piece = links.ctx.chunk_bytes() / es;
  uint8_t* incoming = links.ctx.scratch(piece * es);
  links.ctx.publish_buffer(data);
  links.sync();
  const Range mine = chunk_range(count, n, r);
  uint8_t* slice = data + mine.offset * es;
  for (size_t first = 0; first < mine.count; first += piece) {
    const size_t m = std::min(piece, mine.count - first);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      links.ctx.read_peer(p, (mine.offset + first) * es, incoming, m * es, links.op);
      reduce_into(slice + first * es, incoming, m, t, op);
    }
  }
  if (on_slice) on_slice(slice, mine.count);
  finish_average(slice, mine.count, t, op, world_size);
  links.sync();
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const Range theirs = chunk_range(count, n, p);
    links.ctx.read_peer(p, theirs.offset * es, data + theirs.offset * es, theirs.count * es,
                        links.op);
  }
  links.sync();
}

}  // namespace

void shm_allreduce(ShmLinks& links, void* buf, size_t count, DataType t, ReduceOp op, bool small,
                   int world_size, const std::function<void(uint8_t*, size_t)>& on_slice) {
  const size_t es = element_size(t);
  const size_t per_chunk = links.ctx.chunk_bytes() / es;
  const int n = links.size(), r = links.rank();
  auto* data = static_cast<uint8_t*>(buf);
  if (!small && count > 0 && links.ctx.cma_available())
    return cma_allreduce(links, data, count, t, op, world_size, on_slice);
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t m = std::min(per_chunk, count - first);
    uint8_t* chunk = data + first * es;
    const int s = links.ctx.next_slot();
    std::memcpy(links.ctx.in(r, s), chunk, m * es);
    links.sync();
    if (small) {
      reduce_all(links, chunk, 0, m, t, op, s);
      finish_average(chunk, m, t, op, world_size);
      continue;
    }
    const Range mine = chunk_range(m, n, r);
    uint8_t* slice = links.ctx.out(r, s) + mine.offset * es;
    reduce_all(links, slice, mine.offset * es, mine.count, t, op, s);
    if (on_slice) on_slice(slice, mine.count);
    finish_average(slice, mine.count, t, op, world_size);
    links.sync();
    for (int p = 0; p < n; ++p) {
      const Range theirs = chunk_range(m, n, p);
      std::memcpy(chunk + theirs.offset * es, links.ctx.out(p, s) + theirs.offset * es,
                  theirs.count * es);
    }
  }
}

}  // namespace heft::comm::algo
