// heft::comm::init(): how a worker started by `heft run` (or `heft train`) joins its job.
// Reads the environment the launcher sets (docs/run.md): HEFT_STORE (host:port), HEFT_TOKEN,
// RANK, WORLD_SIZE, and optionally HEFT_JOB (store namespace), HEFT_TIMEOUT,
// HEFT_ALLREDUCE_ALGO, HEFT_BIND_ADDRESS; connects to the store and builds the world
// communicator. Peers listen on the interface that reaches the store unless
// HEFT_BIND_ADDRESS says otherwise.
#pragma once

#include <atomic>
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

// In-place recovery (docs/recovery.md). Waits until the launcher publishes, under
// contract::generation_key(HEFT_JOB), a generation above `after` (it does once it restarted
// the lost rank) and returns it. Polls every 50 ms; returns -1 once `stop` is set (SIGTERM: the
// launcher gave up on recovering in place and stops the group); throws heft::Timeout after
// `timeout` (no launcher restarted the rank).
int wait_for_generation(Store& store, int after, Millis timeout, const std::atomic<bool>* stop);

// Replaces w.comm by the world of generation `generation` (contract::world_group) on
// w.store, as init() built it: the old communicator is closed first (after a lost peer it is
// broken; its links are dropped). Blocks until every rank joined or options.timeout
// (heft::Timeout naming the missing ranks).
void rejoin(World& w, int generation, const CommunicatorOptions& options);

// Reads an integer environment variable; throws InvalidArgument naming it when missing or
// malformed.
int env_int(const char* name);

}  // namespace heft::comm
