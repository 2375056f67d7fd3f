// Binomial-tree reduce to root: in round k a rank whose bit k is set (counted from root)
// sends its partial result to the rank 2^k before it and leaves; the receiver folds it in.
// recv is written only on root.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void tree_reduce(Links& links, const void* send, void* recv, size_t count, DataType t, ReduceOp op, int root);

}  // namespace heft::comm::algo
