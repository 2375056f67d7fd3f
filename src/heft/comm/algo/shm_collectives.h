// The other collectives through a host's shared memory, same slot discipline as
// shm_allreduce.h: write this rank's part of a chunk into its slot, sync, read what is needed
// from the peers' slots. One sync per chunk.
//  - shm_reduce_scatter: send = size() blocks of recv_count; recv = this rank's block reduced
//    in local-rank order (recv may be send + rank*recv_count).
//  - shm_allgather: send = send_count elements; recv = size() blocks (send may be
//    recv + rank*send_count).
//  - shm_broadcast: root's buf to every rank.
//  - shm_reduce: recv on root = reduction of send (recv untouched elsewhere; may equal send).
// `world_size` is the divisor for ReduceOp::avg.
#pragma once

#include <cstddef>

#include "heft/comm/algo/shm_links.h"
#include "heft/comm/dtype.h"

namespace heft::comm::algo {

void shm_reduce_scatter(ShmLinks& links, const void* send, void* recv, size_t recv_count,
                        DataType t, ReduceOp op, int world_size);
void shm_allgather(ShmLinks& links, const void* send, void* recv, size_t send_count, DataType t);
void shm_broadcast(ShmLinks& links, void* buf, size_t bytes, int root);
void shm_reduce(ShmLinks& links, const void* send, void* recv, size_t count, DataType t,
                ReduceOp op, int root, int world_size);
// A barrier among the host's ranks.
inline void shm_barrier(ShmLinks& links) { links.sync(); }

}  // namespace heft::comm::algo
