// Binomial-tree broadcast for small messages: ceil(log2 n) rounds; in round k every rank
// that has the data sends it to the rank 2^k further along (ranks counted from root).
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void tree_broadcast(Links& links, void* buf, size_t bytes, int root);

}  // namespace heft::comm::algo
