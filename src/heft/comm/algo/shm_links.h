// What the shared-memory algorithms are handed: the host's shm::Context, the operation's
// deadline, name and signature. Each shm_*.h algorithm moves data in chunks through the
// slots of shm/context.h and keeps every rank's results bit-identical by reducing in
// local-rank order. The first sync() of an operation checks that every rank of the host made
// the same call (the signature): a rank calling with another size fails every rank with an
// error naming both, instead of the ranks going on over buffers of different lengths.
#pragma once

#include <string>

#include "heft/comm/algo/call_signature.h"
#include "heft/comm/transport/shm/context.h"

namespace heft::comm::algo {

struct ShmLinks {
  shm::Context& ctx;
  Deadline deadline;
  std::string op;
  // The call, checked against the peers' at the first sync(); call == 0: not checked.
  shm::Context::Signature signature{};

  int rank() const { return ctx.rank(); }
  int size() const { return ctx.size(); }
  // ctx.far() for a call of `bytes` (the placement, transport/shm/context.h), carrying the
  // call's check when it synchronises (a probe), so the operation's first sync checks it.
  bool far(size_t bytes) {
    if (signature.call == 0 || !ctx.probes_next()) return ctx.far(deadline, op, bytes);
    const shm::Context::Signature first = signature;
    signature = {};
    return ctx.far(deadline, op, bytes, &first);
  }
  void sync() {
    if (signature.call == 0) return ctx.sync(deadline, op);
    const shm::Context::Signature first = signature;
    signature = {};
    ctx.sync(deadline, op, &first);
  }
};

}  // namespace heft::comm::algo
