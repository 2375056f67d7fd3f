// Pipelined ring allreduce, bandwidth-optimal for large messages: a reduce-scatter
// ring (n-1 steps; in step s rank r sends chunk r-s to its right and reduces chunk r-s-1 from
// its left while it arrives) then an allgather ring (n-1 steps) of the reduced chunks. Every
// rank moves 2(n-1)/n of the buffer. Each chunk is reduced by one chain and copied to all, so
// every rank ends with bit-identical results. In place on buf; any count, any world size.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void ring_allreduce(Links& links, void* buf, size_t count, DataType t, ReduceOp op);

}  // namespace heft::comm::algo
