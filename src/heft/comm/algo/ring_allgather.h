// Ring allgather: every rank contributes send_count elements; recv (size()*send_count
// elements) gets them in rank order. n-1 steps, each forwarding the chunk received in the
// previous one. send may equal recv + rank*send_count (in place).
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void ring_allgather(Links& links, const void* send, void* recv, size_t send_count, DataType t);

}  // namespace heft::comm::algo
