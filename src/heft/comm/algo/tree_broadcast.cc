#include "heft/comm/algo/tree_broadcast.h"

namespace heft::comm::algo {

void tree_broadcast(Links& links, void* buf, size_t bytes, int root) {
  const int n = links.size();
  if (n == 1 || bytes == 0) return;
  const int v = mod(links.rank() - root, n);  // rank counted from root
  auto real = [&](int vr) { return mod(vr + root, n); };
  int mask = 1;
  while (mask < n) {
    if (v & mask) {
      links.recv(real(v - mask), buf, bytes);
      break;
    }
    mask <<= 1;
  }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (v + mask < n) links.send(real(v + mask), buf, bytes);
}

}  // namespace heft::comm::algo
