// Ring reduce-scatter: send holds size()*recv_count elements (chunk i for rank i);
// recv gets this rank's chunk reduced over all ranks. n-1 steps; in step s rank r forwards
// its running sum of chunk r-s-1 and folds its own data into chunk r-s-2 as it arrives.
// recv may equal send + rank*recv_count (in place); it must not overlap send otherwise.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void ring_reduce_scatter(Links& links, const void* send, void* recv, size_t recv_count, DataType t, ReduceOp op);

}  // namespace heft::comm::algo
