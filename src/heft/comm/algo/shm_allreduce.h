// Shared-memory allreduce for the ranks of one host, in place on buf, pipelined in chunks
// of the slot size. Two forms, chosen by `small`:
//  - small (latency): each rank copies its chunk into its slot, one sync, then every rank
//    reduces all slots itself (n reads, one sync per chunk);
//  - large (memory bandwidth): each rank copies its chunk into its slot, sync, reduces only
//    its 1/n slice from all slots into its `out` area, sync, then copies every rank's slice
//    out: a reduce-scatter plus an allgather through memory, each byte read about 2+2/n
//    times instead of n. Where the kernel allows cross-memory attach (shm::Context::
//    cma_available()), the large form skips the slots: each rank reads its slice straight
//    from the peers' buffers and then their finished slices, one copy each, three syncs.
// `world_size` is the divisor for ReduceOp::avg (the host may be part of a larger group;
// pass the host size otherwise). Identical results on every rank.
// on_slice (large form only), when set, is called with this rank's reduced slice of each
// chunk before it is shared: hierarchical_allreduce.h reduces it across hosts there.
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
