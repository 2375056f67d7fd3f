// Allreduce over several hosts: shared memory inside each host, TCP between hosts.
//  - uniform hosts (same number of ranks each): the shared-memory allreduce of
//    shm_allreduce.h (direct form), where between its reduce-scatter and allgather halves
//    each rank allreduces its whole slice, in one call, with the ranks of the same local
//    index on the other hosts (one ring per local index, all in parallel over their own
//    links, as Horovod and SMDDP do). One cross-host call per allreduce rather than one per
//    chunk: 1 MiB on 2 x 2 ranks synchronises about as often as the flat ring, so ranks
//    that share busy cores do not wait for a peer's turn 16 times per call;
//  - otherwise (e.g. 7 ranks as 3+4): reduce to each host's leader through shared memory,
//    allreduce among the leaders over TCP, broadcast back through shared memory.
// The cross-host step uses recursive doubling up to small_bytes, the ring above.
// shm may be null on a rank alone on its host. In place on buf; identical results on every
// rank.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"
#include "heft/comm/algo/shm_links.h"
#include "heft/comm/topology.h"

namespace heft::comm::algo {

void hierarchical_allreduce(Transport& tcp, shm::Context* shm, const Topology& topo, void* buf,
                            size_t count, DataType t, ReduceOp op, size_t small_bytes,
                            Deadline deadline, const std::string& name);

// Allreduce over the ranks of one host where several share a core (topology.h core_groups,
// docs/comm.md "Ranks that share a core"): each core's ranks reduce to its first rank
// through `core` (their own shared memory, in its local order), the cores' first ranks
// allreduce through `leaders` (shm_allreduce.h: the direct form above small_bytes, whose
// stores follow the leaders' placement), and each core's first rank shares the result with
// the rest of its core. `core` is null on a rank alone on its core, `leaders` off the first
// ranks. Each element is added core by core: (x0 op x1) op (x2 op x3) for two cores of two,
// as the direct form folds when the host's context has these groups
// (shm::Context::fold_groups), so the two give the same bits. `world_size` divides for
// ReduceOp::avg. In place on buf.
void core_grouped_allreduce(shm::Context* core, shm::Context* leaders, void* buf, size_t count,
                            DataType t, ReduceOp op, size_t small_bytes, int world_size,
                            Deadline deadline, const std::string& name);

}  // namespace heft::comm::algo
