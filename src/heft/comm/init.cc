#include "heft/comm/init.h"

#include <cstdlib>
#include <string>

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
  w.comm = Communicator::create(store, job.job_name() + "/world", rank,
                                size, o);
  return w;
}

}  // namespace heft::comm
