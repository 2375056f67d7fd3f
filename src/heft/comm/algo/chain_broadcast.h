// Pipelined chain broadcast for large messages: ranks in a line from root; each rank
// forwards bytes to the next as soon as they arrive, so the time is about one buffer
// transfer plus n-2 latencies, not log2(n) whole transfers.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void chain_broadcast(Links& links, void* buf, size_t bytes, int root);

}  // namespace heft::comm::algo
