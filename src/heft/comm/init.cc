#include "heft/comm/init.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <spdlog/cfg/env.h>

#include "heft/comm/knobs.h"
#include "heft/comm/store/tcp_store.h"
#include "heft/contract/worker.h"
#include "heft/error.h"

namespace heft::comm {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v)
    throw InvalidArgument(std::string(name) +
                          " is not set: start workers with `heft run` (see docs/run.md)");
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0)
    throw InvalidArgument(std::string(name) + ": expected a non-negative integer, found '" + v +
                          "'");
  return static_cast<int>(x);
}

namespace {

// Every rank of generation `generation` joined (Communicator::create returned): say so.
void mark_formed(Store& store, const std::string& job, int generation) {
  const std::string g = std::to_string(generation);
  store.set(contract::formed_key(job), Bytes(g.begin(), g.end()));
}

}  // namespace

World init() { return init(CommunicatorOptions::from_env()); }

World init(const CommunicatorOptions& options) {
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows each allreduce's path
  const contract::HeftVariables job = contract::HeftVariables::from_process();
  if (!job.store)
    throw InvalidArgument("HEFT_STORE is not set: start workers with `heft run` (see docs/run.md)");
  const int rank = env_int("RANK");
  const int size = env_int("WORLD_SIZE");
  CommunicatorOptions o = options;
  if (o.token.empty())
    throw InvalidArgument("HEFT_TOKEN is not set: start workers with `heft run` (see docs/run.md)");
  auto store = std::shared_ptr<TcpStore>(TcpStore::connect(*job.store, o.token, o.timeout));
  store->set_timeout(o.timeout);
  if (!knob_value("HEFT_BIND_ADDRESS")) o.bind_address = store->local_address();
  World w;
  w.store = store;
  const int generation = job.generation.value_or(0);
  w.comm = Communicator::create(store, contract::world_group(job.job_name(), generation), rank, size, o);
  if (generation > 0) mark_formed(*store, job.job_name(), generation);
  return w;
}

int wait_for_generation(Store& store, int after, Millis timeout, const std::atomic<bool>* stop) {
  const std::string key = contract::generation_key(contract::HeftVariables::from_process().job_name());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (stop && stop->load()) return -1;
    if (store.check({key})) {
      const Bytes v = store.get(key, timeout);
      const int generation = std::atoi(std::string(v.begin(), v.end()).c_str());
      if (generation > after) return generation;
    }
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout("in-place recovery: no restarted rank's generation above " + std::to_string(after) +
                    " under " + key + " after " + std::to_string(timeout.count() / 1000) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void rejoin(World& w, int generation, const CommunicatorOptions& options) {
  const int rank = w.comm->rank();
  const int size = w.comm->size();
  w.comm.reset();
  CommunicatorOptions o = options;
  if (!knob_value("HEFT_BIND_ADDRESS")) {
    if (const auto* tcp = dynamic_cast<const TcpStore*>(w.store.get())) o.bind_address = tcp->local_address();
  }
  const std::string job = contract::HeftVariables::from_process().job_name();
  w.comm = Communicator::create(w.store, contract::world_group(job, generation), rank, size, o);
  mark_formed(*w.store, job, generation);
}

}  // namespace heft::comm
