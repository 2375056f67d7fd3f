// Shared-memory allreduce for the ranks of one host, in place on buf. Three forms:
//  - small (latency; `small` true): pipelined in chunks of the slot size; each rank copies
//    its chunk into its slot, one sync, then every rank reduces all slots itself (n reads,
//    one sync per chunk);
//  - slots (memory bandwidth): each rank copies its chunk into its slot, sync, reduces only
//    its 1/n slice from all slots into its `out` area, sync, then copies every rank's slice
//    out: a reduce-scatter plus an allgather through memory, each byte read about 2+2/n
//    times instead of n;
//  - single copy, where the kernel allows cross-memory attach (shm::Context::
//    cma_available()): no slots; each rank reads its slice straight from the peers' buffers
//    (process_vm_readv) and then their finished slices, one copy each, three syncs.
// Between slots and single copy the host chooses by measurement (unless
// shm::ContextOptions::measure_single_copy is off): at the first large allreduce of each
// power-of-two size, every rank runs both forms once and times them twice on a scratch buffer of that size
// (at most 16 MiB) placed like the user's, the ranks agree on the slowest rank's times, and
// the faster form is kept for that size. Slot data is placed at the user buffer's offset
// mod 64 and single-copy scratch at the peer's, so no copy runs misaligned.
// `world_size` is the divisor for ReduceOp::avg (the host may be part of a larger group;
// pass the host size otherwise). Identical results on every rank; count 0 returns at once.
// Every form reduces each element in local-rank order ((x0 op x1) op x2 ...), so the three
// give the same bits and which one a measurement picks never changes a result.
// on_slice, when set, forces the slots form and is called with this rank's reduced slice of
// each chunk before it is shared: hierarchical_allreduce.h reduces it across hosts there (the
// slots form chunks the same way on every host, whatever each host would have measured).
// Each call counts its form in links.ctx.path_counts().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "heft/comm/algo/shm_links.h"
#include "heft/comm/dtype.h"

namespace heft::comm::algo {

void shm_allreduce(ShmLinks& links, void* buf, size_t count, DataType t, ReduceOp op, bool small,
                   int world_size,
                   const std::function<void(uint8_t* slice, size_t count)>& on_slice = nullptr);

}  // namespace heft::comm::algo
