#include "heft/comm/algo/ring_allgather.h"

#include <cstring>

namespace heft::comm::algo {

void ring_allgather(Links& links, const void* send, void* recv, size_t send_count,
                    DataType t) {
  const int n = links.size(), r = links.rank();
  const size_t chunk_bytes = send_count * element_size(t);
  auto* out = static_cast<uint8_t*>(recv);
  if (out + r * chunk_bytes != send) std::memmove(out + r * chunk_bytes, send, chunk_bytes);
  if (n == 1 || chunk_bytes == 0) return;
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  for (int s = 0; s < n - 1; ++s) {
    links.sendrecv(right, out + mod(r - s, n) * chunk_bytes, chunk_bytes, left,
                   out + mod(r - s - 1, n) * chunk_bytes, chunk_bytes);
  }
}

}  // namespace heft::comm::algo
