// Recursive-doubling allreduce, latency-optimal for small messages: log2(p) steps in
// which partners (rank XOR 2^k) swap whole buffers and reduce. For a world size that is not
// a power of two, the first 2*rem ranks fold pairwise first (even sends to odd) and get the
// result back at the end. Partners reduce the same two operands, so results are identical
// on every rank for commutative ops. In place on buf.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void recursive_doubling_allreduce(Links& links, void* buf, size_t count, DataType t, ReduceOp op);

}  // namespace heft::comm::algo
