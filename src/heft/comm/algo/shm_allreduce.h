// Shared-memory allreduce for the ranks of one host, in place on buf, in the form the caller's
// plan names (allreduce_plan.h: Communicator::Impl::plan_allreduce decides; this file only
// carries it out). Four forms (bytes per rank for an allreduce of N bytes over n ranks in
// docs/comm.md):
//  - small (latency; ShmStep::kSmall): pipelined in chunks of the slot size; each rank copies
//    its chunk into its slot, one sync, then every rank reduces all slots itself;
//  - direct (the default above small): the buffer is cut into n slices at multiples of 64
//    bytes; each rank copies only the peers' slices into its slot (never its own), reduces
//    its slice from its own buffer and the peers' copies into its out area, a few KiB at a
//    time, each copied at once into its buffer, and the peers copy it from there: each byte
//    of a peer's slice read once, each reduced byte written once for the peers. Pipelined
//    in pieces of chunk_bytes / (n - 1) per peer, three pieces in flight, one sync per piece;
//  - slots (kept to compare, ShmStep::kSlots): each rank copies its
//    whole chunk into its slot, sync, reduces its 1/n slice of the chunk into its out area,
//    sync, copies every rank's slice out;
//  - single copy (kSingleCopy, planned only where the kernel allows cross-memory attach): each
//    rank reads its slice straight from the peers' buffers (process_vm_readv) and then their
//    finished slices, one copy each, three syncs.
// The direct form's stores follow the plan's `far` (the ranks' placement, shm/context.h
// Context::far, probed by the planner): far, it writes both slot areas with streaming stores,
// so the peer reads them from memory rather than across the host's interconnect from this
// core's cache; near, cached. Never a bit of the result. Slot data is placed at the user
// buffer's offset mod 64 and single-copy scratch at the peer's, so no copy runs misaligned.
// `world_size` is the divisor for ReduceOp::avg (the host may be part of a larger group;
// pass the host size otherwise). Identical results on every rank; count 0 returns at once.
// Every form reduces each element in local-rank order ((x0 op x1) op x2 ...), through
// reduce.h for every op and dtype, so all give the same bits; where the context has fold
// groups (ranks that share a core, shm::Context::fold_groups), the direct form folds group
// by group instead, as core_grouped_allreduce (hierarchical_allreduce.h) does.
// on_slice, when set, needs the direct form (step kDirect) and is called once with this rank's whole
// reduced slice before it is shared: hierarchical_allreduce.h reduces it across hosts there
// (one cross-host allreduce per call, not one per chunk: fewer synchronisations, which is
// what keeps the hierarchical form fast when ranks share busy cores; the slices are the
// same on every host of the same size).
// Each call counts its form in links.ctx.path_counts().
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "heft/comm/algo/shm_links.h"
#include "heft/comm/allreduce_plan.h"
#include "heft/comm/dtype.h"

namespace heft::comm::algo {

// `step`: kSmall, kDirect, kSlots or kSingleCopy (heft::InvalidArgument otherwise, and for a
// single copy the context cannot do or an on_slice without kDirect); `far` only for kDirect.
void shm_allreduce(ShmLinks& links, void* buf, size_t count, DataType t, ReduceOp op,
                   ShmStep step, bool far, int world_size,
                   const std::function<void(uint8_t* slice, size_t count)>& on_slice = nullptr);

}  // namespace heft::comm::algo
