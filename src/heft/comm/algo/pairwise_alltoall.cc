#include "heft/comm/algo/pairwise_alltoall.h"

#include <cstring>

namespace heft::comm::algo {

void pairwise_alltoall(Links& links, const void* send, void* recv, size_t count, DataType t) {
  const int n = links.size(), r = links.rank();
  const size_t block = count * element_size(t);
  const auto* in = static_cast<const uint8_t*>(send);
  auto* out = static_cast<uint8_t*>(recv);
  std::memcpy(out + r * block, in + r * block, block);
  if (block == 0) return;
  for (int s = 1; s < n; ++s) {
    const int to = mod(r + s, n), from = mod(r - s, n);
    links.sendrecv(to, in + to * block, block, from, out + from * block, block);
  }
}

}  // namespace heft::comm::algo
