#include "heft/comm/algo/shm_allreduce.h"

#include <algorithm>
#include <cstring>

#include "heft/comm/algo/links.h"
#include "heft/comm/copy.h"
#include "heft/comm/reduce.h"
#include "heft/error.h"

namespace heft::comm::algo {

namespace {

using Slice = std::function<void(uint8_t*, size_t)>;

// The direct form reduces and copies out in pieces of this size, so the copy of the
// reduced data to the user's buffer reads it back from L1 (the two stores of one pass).
constexpr size_t kFuseBytes = 16 << 10;

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

// Elements [offset, offset + count) of rank p's slice in the direct form: the buffer cut into
// n parts at multiples of 64 bytes from its start, so every piece of every slice sits at the
// buffer's own offset mod 64 (copies into the slots, placed there, run aligned).
Range aligned_slice(size_t count, int n, int p, size_t es) {
  const size_t unit = std::max<size_t>(1, 64 / es);
  const Range blocks = chunk_range((count + unit - 1) / unit, n, p);
  const size_t first = std::min(count, blocks.offset * unit);
  const size_t last = std::min(count, (blocks.offset + blocks.count) * unit);
  return {first, last - first};
}

// The direct form (see the header): slices of the whole buffer, moved in pieces of at most
// `piece` elements; step j moves piece j of every slice. It writes the user's buffer with
// cached stores at every size: in place, every line it writes was read shortly before (the
// own slice by the reduce, a peer's slice by the scatter), so streaming stores save no
// read-for-ownership and only force the writes out. One rank's traffic of the 2-rank form
// on Zen 5 (scatter, fused reduce, gather; best of 5): 15.3 GB/s cached against 13.7
// streaming at 64 MiB, 20.1 against 14.4 at 16 MiB; the form streamed above the L3 size
// until 2026-11-27.
//
// Far (the ranks' CPUs share no cache, shm/context.h: the placement): every line this rank
// writes into its slot is read by the peer, and a cached store leaves it in this core's
// cache, so the peer's read and this rank's next write of the slot each cross the host's
// interconnect. Far, the direct form therefore writes the slots with streaming stores: the
// peers' pieces in the scatter, and the reduced piece into the out area (the sums in one
// pass, the user's buffer cached and the out area streamed: reduce_to_both_streaming; an
// average finished in the buffer first, then copied from L1 with streaming stores), so the
// peer reads them from memory. Near, the shared cache hands lines over faster than memory: cached.
class Direct {
 public:
  Direct(ShmLinks& links, uint8_t* data, size_t count, DataType t, ReduceOp op, int world_size,
         bool far = false)
      : links_(links), data_(data), count_(count), t_(t), op_(op), world_size_(world_size),
        far_(far), stream_(far || links.ctx.stream_slots()),
        es_(element_size(t)), n_(links.size()), r_(links.rank()),
        region_bytes_((links.ctx.chunk_bytes() / std::max(1, n_ - 1)) & ~size_t{63}),
        piece_(region_bytes_ / es_), placed_(offset_of(data)),
        groups_(links.ctx.fold_groups()) {
    for (int p = 0; p < n_; ++p)
      steps_ = std::max(steps_, (slice(p).count + piece_ - 1) / piece_);
    if (!groups_.empty()) group_scratch_ = links.ctx.scratch(kFuseBytes, placed_, 1);
  }

  // Flat: one synchronisation per step, three steps in flight: piece j scattered into the
  // slots, piece j-1 reduced, piece j-2 gathered from the peers' out areas.
  void run() {
    int s1 = -1, s2 = -1;  // the slots of the two steps before
    for (size_t j = 0; j < steps_ + 2; ++j) {
      int s = -1;
      if (j < steps_) scatter(j, s = links_.ctx.next_slot());
      if (j >= 1 && j <= steps_) reduce(j - 1, s1, /*average=*/true);
      if (j >= 2) gather(j - 2, s2);
      if (j <= steps_) links_.sync();
      s2 = s1;
      s1 = s;
    }
  }

  // Hierarchical: all of this rank's slice reduced on the host, then on_slice on it (one
  // cross-host call, not one per chunk), then the slices shared.
  void run(const Slice& on_slice) {
    int s1 = -1;
    for (size_t j = 0; j <= steps_; ++j) {
      const int s = j < steps_ ? links_.ctx.next_slot() : -1;
      if (j < steps_) scatter(j, s);
      if (j >= 1) reduce(j - 1, s1, /*average=*/false);
      if (j < steps_) links_.sync();
      s1 = s;
    }
    const Range mine = slice(r_);
    on_slice(data_ + mine.offset * es_, mine.count);
    finish_average(data_ + mine.offset * es_, mine.count, t_, op_, world_size_);
    for (size_t j = 0; j <= steps_; ++j) {
      const int s = j < steps_ ? links_.ctx.next_slot() : -1;
      if (j < steps_) {
        links_.ctx.place(s, placed_);
        const Range q = part(r_, j);
        copy_bytes(links_.ctx.out(r_, s), data_ + q.offset * es_, q.count * es_);
      }
      if (j >= 1) gather(j - 1, s1);
      if (j < steps_) links_.sync();
      s1 = s;
    }
  }

 private:
  Range slice(int p) const { return aligned_slice(count_, n_, p, es_); }
  Range part(int p, size_t j) const {
    const Range s = slice(p);
    const size_t first = std::min(s.count, j * piece_);
    return {s.offset + first, std::min(piece_, s.count - first)};
  }
  // Where writer w keeps owner p's piece in its in area: one region per owner but itself.
  size_t region(int owner, int writer) const {
    return (owner < writer ? owner : owner - 1) * region_bytes_;
  }

  // Piece j of every peer's slice from this rank's buffer into its in area of slot s
  // (streamed where ContextOptions::stream_slots asks: the peer reads it, this rank does not).
  void scatter(size_t j, int s) {
    links_.ctx.place(s, placed_);
    for (int p = 0; p < n_; ++p) {
      const Range q = part(p, j);
      if (p == r_ || q.count == 0) continue;
      copy_bytes(links_.ctx.in(r_, s) + region(p, r_), data_ + q.offset * es_, q.count * es_,
                 stream_ ? StoreHint::kStreaming : StoreHint::kCached);
      streamed_pieces_ += stream_;
    }
  }

  // Piece j of this rank's slice: the peers' copies (slot s) and its own data, folded in
  // local-rank order into its out area, a few KiB at a time; the last fold stores each
  // result into the out area and the user's buffer in one pass (reduce_to_both), or, for an
  // average to finish or where that pass cannot run, into the out area and then copied into
  // the user's buffer (read back from L1).
  void reduce(size_t j, int s, bool average) {
    const Range q = part(r_, j);
    uint8_t* out = links_.ctx.out(r_, s);
    const bool one_pass = !(average && op_ == ReduceOp::avg);
    for (size_t f = 0; f < q.count; f += kFuseBytes / es_) {
      const size_t m = std::min(kFuseBytes / es_, q.count - f);
      uint8_t* own = data_ + (q.offset + f) * es_;
      uint8_t* o = out + f * es_;
      auto area = [&](int p) -> const uint8_t* {
        return p == r_ ? own : links_.ctx.in(p, s) + region(r_, p) + f * es_;
      };
      const uint8_t *x = area(0), *y = area(1);  // the last fold's inputs
      if (!groups_.empty()) {
        // Group by group (Context::fold_groups): each group folded in its order (into o
        // for the first, the scratch for the others), the groups' results in theirs.
        auto fold = [&](const std::vector<int>& g, uint8_t* dst) -> const uint8_t* {
          if (g.size() == 1) return area(g[0]);
          reduce_to(dst, area(g[0]), area(g[1]), m, t_, op_);
          for (size_t i = 2; i < g.size(); ++i) reduce_into(dst, area(g[i]), m, t_, op_);
          return dst;
        };
        x = fold(groups_[0], o);
        for (size_t g = 1; g + 1 < groups_.size(); ++g) {
          reduce_to(o, x, fold(groups_[g], group_scratch_), m, t_, op_);
          x = o;
        }
        y = fold(groups_.back(), group_scratch_);
      } else if (n_ > 2) {
        reduce_to(o, x, y, m, t_, op_);
        for (int p = 2; p < n_ - 1; ++p) reduce_into(o, area(p), m, t_, op_);
        x = o;
        y = area(n_ - 1);
      }
      if (far_) {  // the buffer cached, the out area streamed (the peer reads it, not us)
        if (one_pass) {  // one pass where reduce.h's explicit sums apply, else two
          one_pass_pieces_ += reduce_to_both_streaming(own, o, x, y, m, t_, op_);
        } else {  // an average: finished in the buffer, then streamed from L1
          reduce_to(own, x, y, m, t_, op_);
          finish_average(own, m, t_, op_, world_size_);
          copy_bytes(o, own, m * es_, StoreHint::kStreaming);
        }
        ++streamed_pieces_;
        continue;
      }
      if (one_pass) {
        one_pass_pieces_ += reduce_to_both(own, o, x, y, m, t_, op_);
        continue;
      }
      reduce_to(o, x, y, m, t_, op_);
      finish_average(o, m, t_, op_, world_size_);
      copy_bytes(own, o, m * es_);
    }
  }

  // Piece j of every peer's reduced slice from its out area of slot s into the user's buffer.
  void gather(size_t j, int s) {
    for (int p = 0; p < n_; ++p) {
      const Range q = part(p, j);
      if (p == r_ || q.count == 0) continue;
      copy_bytes(data_ + q.offset * es_, links_.ctx.out(p, s), q.count * es_);
    }
  }

  ShmLinks& links_;
  uint8_t* data_;
  size_t count_;
  DataType t_;
  ReduceOp op_;
  int world_size_;
  bool far_, stream_;
  size_t es_;
  int n_, r_;
  size_t region_bytes_, piece_, placed_;
  const std::vector<std::vector<int>>& groups_;  // the fold's order (Context::fold_groups)
  uint8_t* group_scratch_ = nullptr;              // a group's fold, kFuseBytes
  size_t steps_ = 0;

 public:
  uint64_t one_pass_pieces_ = 0;  // reduce_to_both took its one pass (PathCounts::one_pass)
  uint64_t streamed_pieces_ = 0;  // scattered with streaming stores (PathCounts::streamed)
};

}  // namespace

void shm_allreduce(ShmLinks& links, void* buf, size_t count, DataType t, ReduceOp op,
                   ShmStep step, bool far, int world_size, const Slice& on_slice) {
  if ((on_slice && step != ShmStep::kDirect) ||
      (step == ShmStep::kSingleCopy && !links.ctx.cma_available()) ||
      (far && step != ShmStep::kDirect))
    throw InvalidArgument(std::string("shm_allreduce: no ") + name(step) +
                          (far ? " far" : "") + " form here (the plan is wrong)");
  if (count == 0) return;
  auto* data = static_cast<uint8_t*>(buf);
  shm::PathCounts& counts = links.ctx.path_counts();
  if (links.size() == 1) {  // nothing to share: the cross-host step and the average only
    if (on_slice) on_slice(data, count);
    return finish_average(data, count, t, op, world_size);
  }
  switch (step) {
    case ShmStep::kSmall:
      ++counts.small;
      return slots_allreduce(links, data, count, t, op, true, world_size, nullptr);
    case ShmStep::kSingleCopy:
      ++counts.single_copy;
      return cma_allreduce(links, data, count, t, op, world_size, nullptr);
    case ShmStep::kSlots:
      ++counts.slots;
      return slots_allreduce(links, data, count, t, op, false, world_size, nullptr);
    case ShmStep::kDirect: {
      ++counts.direct;
      Direct direct(links, data, count, t, op, world_size, far);
      if (on_slice) direct.run(on_slice);
      else direct.run();
      counts.one_pass += direct.one_pass_pieces_;
      counts.streamed += direct.streamed_pieces_;
      return;
    }
    default:
      throw InvalidArgument(std::string("shm_allreduce: no ") + name(step) + " form");
  }
}

}  // namespace heft::comm::algo
