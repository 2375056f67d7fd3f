// What the shared-memory algorithms are handed: the host's shm::Context, the operation's
// deadline and name. Each shm_*.h algorithm moves data in chunks through the slots of
// shm/context.h and keeps every rank's results bit-identical by reducing in local-rank order.
#pragma once

#include <string>

#include "heft/comm/transport/shm/context.h"

namespace heft::comm::algo {

struct ShmLinks {
  shm::Context& ctx;
  Deadline deadline;
  std::string op;

  int rank() const { return ctx.rank(); }
  int size() const { return ctx.size(); }
  void sync() { ctx.sync(deadline, op); }
};

}  // namespace heft::comm::algo
