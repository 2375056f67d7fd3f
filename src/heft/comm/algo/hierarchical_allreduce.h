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

}  // namespace heft::comm::algo
