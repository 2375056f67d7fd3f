#include "heft/comm/algo/shm_allreduce.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include <spdlog/spdlog.h>

#include "heft/comm/algo/links.h"
#include "heft/comm/copy.h"
#include "heft/comm/reduce.h"

namespace heft::comm::algo {

namespace {

using Slice = std::function<void(uint8_t*, size_t)>;

// The largest buffer the measurement times (bigger sizes are decided at this size).
constexpr size_t kMeasureCapBytes = size_t{16} << 20;

size_t offset_of(const void* p) { return reinterpret_cast<uintptr_t>(p) & 63; }

// dst = in[0] op in[1] op ... (the slot's in areas, from offset_bytes) in local-rank order,
// the first step fused with the copy.
void reduce_all(ShmLinks& links, uint8_t* dst, size_t offset_bytes, size_t count, DataType t,
                ReduceOp op, int slot) {
  auto area = [&](int p) { return links.ctx.in(p, slot) + offset_bytes; };
  reduce_to(dst, area(0), area(1), count, t, op);
  for (int p = 2; p < links.size(); ++p) reduce_into(dst, area(p), count, t, op);
}

// The small and slots forms (see the header), chunk by chunk.
void slots_allreduce(ShmLinks& links, uint8_t* data, size_t count, DataType t, ReduceOp op,
                     bool small, int world_size, const Slice& on_slice) {
  const size_t es = element_size(t);
  const size_t per_chunk = links.ctx.chunk_bytes() / es;
  const int n = links.size(), r = links.rank();
  const size_t placed = offset_of(data);  // every chunk starts at a multiple of 64 from data
  const StoreHint out_hint = hint_for_output(count * es);
  for (size_t first = 0; first < count; first += per_chunk) {
    const size_t m = std::min(per_chunk, count - first);
    uint8_t* chunk = data + first * es;
    const int s = links.ctx.next_slot();
    links.ctx.place(s, placed);
    copy_bytes(links.ctx.in(r, s), chunk, m * es);
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
      copy_bytes(chunk + theirs.offset * es, links.ctx.out(p, s) + theirs.offset * es,
                 theirs.count * es, out_hint);
    }
  }
}

// Single-copy form (cross-memory attach): no slots. Each rank reduces its 1/n slice by
// reading the peers' buffers directly, a cache-sized *piece* at a time, into scratch placed
// at the peer's offset mod 64 (the kernel's copy has the same alignment cliff as glibc's),
// in local-rank order as the slots do: the peers below this rank folded into a second
// scratch area, that folded into its own data (a op b == b op a exactly), then the peers
// above, so both forms give the same bits and the choice between them never shows;
// then copies every other rank's finished slice out of that rank's buffer: straight into
// the user's buffer when the two sit at the same offset mod 64, else through scratch and
// heft's own copy. Three syncs per call: buffers published / slices reduced / everyone done
// reading.
void cma_allreduce(ShmLinks& links, uint8_t* data, size_t count, DataType t, ReduceOp op,
                   int world_size, const Slice& on_slice) {
  const size_t es = element_size(t);
  const int n = links.size(), r = links.rank();
  const size_t piece = links.ctx.chunk_bytes() / es;
  links.ctx.publish_buffer(data);
  links.sync();
  const Range mine = chunk_range(count, n, r);
  uint8_t* slice = data + mine.offset * es;
  for (size_t first = 0; first < mine.count; first += piece) {
    const size_t m = std::min(piece, mine.count - first);
    const size_t at = (mine.offset + first) * es;
    uint8_t* own = slice + first * es;
    uint8_t* below = nullptr;  // peers 0..r-1, folded in order
    for (int p = 0; p < n; ++p) {
      if (p == r) {
        if (below) reduce_into(own, below, m, t, op);
        continue;
      }
      uint8_t* incoming =
          links.ctx.scratch(m * es, links.ctx.peer_buffer(p) + at, /*index=*/p == 0 ? 1 : 0);
      links.ctx.read_peer(p, at, incoming, m * es, links.op);
      if (p == 0) below = incoming;
      else if (p < r) reduce_into(below, incoming, m, t, op);
      else reduce_into(own, incoming, m, t, op);
    }
  }
  if (on_slice) on_slice(slice, mine.count);
  finish_average(slice, mine.count, t, op, world_size);
  links.sync();
  const StoreHint out_hint = hint_for_output(count * es);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    const Range theirs = chunk_range(count, n, p);
    const uint64_t peer = links.ctx.peer_buffer(p);
    if (((reinterpret_cast<uintptr_t>(data) - peer) & 63) == 0) {
      links.ctx.read_peer(p, theirs.offset * es, data + theirs.offset * es, theirs.count * es,
                          links.op);
      continue;
    }
    for (size_t first = 0; first < theirs.count; first += piece) {
      const size_t m = std::min(piece, theirs.count - first);
      const size_t at = (theirs.offset + first) * es;
      uint8_t* incoming = links.ctx.scratch(m * es, peer + at);
      links.ctx.read_peer(p, at, incoming, m * es, links.op);
      copy_bytes(data + at, incoming, m * es, out_hint);
    }
  }
  links.sync();
}

// The measurement described in the header; returns the choice for count elements.
bool measure_single_copy(ShmLinks& links, const uint8_t* data, size_t count, DataType t,
                         ReduceOp op) {
  const size_t es = element_size(t);
  const size_t m = std::min(count, kMeasureCapBytes / es);
  // Placed like the user's buffer (the context's scratch areas are cma_allreduce's).
  std::vector<uint8_t> area(m * es + 128, 0);
  uint8_t* probe = area.data() + ((offset_of(data) - offset_of(area.data())) & 63);
  double best[2] = {std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
  // Round 0 warms both forms up (the probe's pages, the peers' page pinning) untimed.
  for (int round = 0; round < 3; ++round) {
    for (int form = 0; form < 2; ++form) {
      const auto start = std::chrono::steady_clock::now();
      if (form == 1) cma_allreduce(links, probe, m, t, op, 1, nullptr);
      else slots_allreduce(links, probe, m, t, op, false, 1, nullptr);
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (round > 0) best[form] = std::min(best[form], s);
    }
  }
  // The slowest rank's time of each form decides, the same on every rank.
  slots_allreduce(links, reinterpret_cast<uint8_t*>(best), 2, DataType::f64, ReduceOp::max,
                  true, 1, nullptr);
  const bool single = best[1] < best[0];
  links.ctx.set_single_copy_choice(count * es, single);
  spdlog::debug("{}: shared memory at {} B: single copy {:.1f} us, slots {:.1f} us: {} from now on",
                links.op, m * es, best[1] * 1e6, best[0] * 1e6, single ? "single copy" : "slots");
  return single;
}

bool use_single_copy(ShmLinks& links, const uint8_t* data, size_t count, DataType t,
                     ReduceOp op) {
  if (!links.ctx.cma_available()) return false;
  if (!links.ctx.measure_single_copy()) return true;
  const int known = links.ctx.single_copy_choice(count * element_size(t));
  if (known >= 0) return known == 1;
  return measure_single_copy(links, data, count, t, op);
}

}  // namespace

void shm_allreduce(ShmLinks& links, void* buf, size_t count, DataType t, ReduceOp op, bool small,
                   int world_size, const Slice& on_slice) {
  if (count == 0) return;
  auto* data = static_cast<uint8_t*>(buf);
  shm::PathCounts& counts = links.ctx.path_counts();
  if (small) {
    ++counts.small;
    return slots_allreduce(links, data, count, t, op, true, world_size, nullptr);
  }
  // Hosts of a hierarchical allreduce may choose differently, and the two forms hand
  // on_slice different slices: with on_slice, every host takes the slots.
  if (!on_slice && use_single_copy(links, data, count, t, op)) {
    ++counts.single_copy;
    return cma_allreduce(links, data, count, t, op, world_size, on_slice);
  }
  ++counts.slots;
  slots_allreduce(links, data, count, t, op, false, world_size, on_slice);
}

}  // namespace heft::comm::algo
