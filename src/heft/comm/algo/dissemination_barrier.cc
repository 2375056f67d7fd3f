#include "heft/comm/algo/dissemination_barrier.h"

namespace heft::comm::algo {

void dissemination_barrier(Links& links) {
  const int n = links.size(), r = links.rank();
  uint8_t token = 1, got = 0;
  for (int k = 1; k < n; k <<= 1)
    links.sendrecv(mod(r + k, n), &token, 1, mod(r - k, n), &got, 1);
}

}  // namespace heft::comm::algo
