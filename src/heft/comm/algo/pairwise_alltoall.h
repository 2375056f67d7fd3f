// Pairwise-exchange alltoall: send and recv hold size()*count elements; block j of send
// goes to rank j and lands in block rank() of its recv. n-1 steps, step s exchanging with
// ranks r+s and r-s. send and recv must not overlap.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void pairwise_alltoall(Links& links, const void* send, void* recv, size_t count, DataType t);

}  // namespace heft::comm::algo
