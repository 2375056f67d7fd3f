// Dissemination barrier: ceil(log2 n) rounds; in round k rank r signals r+2^k and waits
// for r-2^k. No rank leaves before every rank has entered.
#pragma once

#include <cstddef>

#include "heft/comm/algo/links.h"

namespace heft::comm::algo {

void dissemination_barrier(Links& links);

}  // namespace heft::comm::algo
