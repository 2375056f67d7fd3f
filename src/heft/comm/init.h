// heft::comm::init(): how a worker started by `heft run` (or `heft train`) joins its job.
// Reads the environment the launcher sets (docs/run.md): HEFT_STORE (host:port), HEFT_TOKEN,
// RANK, WORLD_SIZE, and optionally HEFT_JOB (store namespace), HEFT_TIMEOUT,
// HEFT_ALLREDUCE_ALGO, HEFT_BIND_ADDRESS; connects to the store and builds the world
// communicator. Peers listen on the interface that reaches the store unless
// HEFT_BIND_ADDRESS says otherwise.
#pragma once

#include <memory>

#include "heft/comm/communicator.h"
#include "heft/comm/store/store.h"

namespace heft::comm {

struct World {
  std::shared_ptr<Store> store;
  std::unique_ptr<Communicator> comm;
};

// Throws heft::InvalidArgument naming the missing or malformed variable, or what
// Communicator::create throws.
World init();

// `init()` with explicit options (taken from the environment first, then overridden by the
// caller, e.g. `heft bench --algo`).
World init(const CommunicatorOptions& options);

// Reads an integer environment variable; throws InvalidArgument naming it when missing or
// malformed.
int env_int(const char* name);

}  // namespace heft::comm
