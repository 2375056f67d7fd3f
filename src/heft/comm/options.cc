#include "heft/comm/options.h"

#include <algorithm>
#include <cstdlib>

#include <unistd.h>

#include "heft/comm/knobs.h"
#include "heft/contract/worker.h"
#include "heft/error.h"

namespace heft::comm {

size_t default_shm_chunk_bytes(long l2_bytes) {
  if (l2_bytes < 0) {
    static const long here = sysconf(_SC_LEVEL2_CACHE_SIZE);
    l2_bytes = here;
  }
  if (l2_bytes <= 0) return 256 << 10;
  const size_t half = static_cast<size_t>(l2_bytes) / 2 / 4096 * 4096;
  return std::clamp<size_t>(half, 64 << 10, 1 << 20);
}

namespace {

constexpr const char* kAlgorithmNames[] = {"auto", "ring",  "recursive_doubling", "tree",
                                           "chain", "shm", "hierarchical"};
constexpr int kAlgorithms = sizeof(kAlgorithmNames) / sizeof(kAlgorithmNames[0]);

}  // namespace

const char* name(Algorithm a) { return kAlgorithmNames[static_cast<int>(a)]; }

Algorithm parse_algorithm(const std::string& s) {
  std::string all;
  for (int i = 0; i < kAlgorithms; ++i) {
    if (s == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
    all += std::string(i ? ", " : "") + kAlgorithmNames[i];
  }
  throw InvalidArgument("unknown algorithm '" + s + "': expected one of " + all);
}

CommunicatorOptions CommunicatorOptions::from_env() {
  CommunicatorOptions o;
  // The worker contract's fields (contract/worker.h); the rest are comm's own knobs.
  const contract::HeftVariables job = contract::HeftVariables::from_process();
  o.token = job.token.value_or("");
  o.timeout = std::chrono::seconds(job.timeout());
  o.host = job.host.value_or("");
  o.measure_shm_small = true;  // HEFT_SHM_SMALL_BYTES=N turns it off
  o.measure_shm_cores = true;  // HEFT_SHM_CORES_MIN_BYTES=N turns it off
  o.measure_small_messages = true;  // HEFT_SMALL_MESSAGE_BYTES=N turns it off
  o.measure_far_line = true;  // HEFT_SHM_FAR_NS=N turns it off
  for (const Knob& k : tuning_knobs()) {
    const char* v = k.apply ? knob_value(k.name) : nullptr;
    if (v) k.apply(o, v);
  }
  return o;
}

CommunicatorOptions::ShmForm CommunicatorOptions::effective_shm_form() const {
  if (shm_form != ShmForm::kAuto) return shm_form;
  switch (shm_single_copy) {
    case SingleCopy::kOn: return ShmForm::kSingleCopy;
    case SingleCopy::kOff: return ShmForm::kSlots;
    case SingleCopy::kAuto: break;
  }
  return ShmForm::kAuto;
}

std::string env_or(const char* var, const std::string& fallback) {
  const char* v = std::getenv(var);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace heft::comm
