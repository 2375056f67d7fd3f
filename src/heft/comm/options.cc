#include "heft/comm/options.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>

#include <unistd.h>

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


long long env_number(const char* var, long long fallback, long long min_value) {
  const char* v = std::getenv(var);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < min_value)
    throw InvalidArgument(std::string(var) + ": expected an integer >= " +
                          std::to_string(min_value) + ", found '" + v + "'");
  return x;
}

Algorithm env_algorithm(const char* var) {
  try {
    return parse_algorithm(env_or(var, "auto"));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string(var) + ": " + e.what());
  }
}

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
  o.token = env_or("HEFT_TOKEN", "");
  o.timeout = std::chrono::seconds(env_number("HEFT_TIMEOUT", 300, 1));
  o.allreduce_algorithm = env_algorithm("HEFT_ALLREDUCE_ALGO");
  o.broadcast_algorithm = env_algorithm("HEFT_BROADCAST_ALGO");
  o.small_message_bytes = static_cast<size_t>(
      env_number("HEFT_SMALL_MESSAGE_BYTES", static_cast<long long>(o.small_message_bytes), 0));
  o.bind_address = env_or("HEFT_BIND_ADDRESS", o.bind_address);
  o.host = env_or("HEFT_HOST", "");
  const std::string transport = env_or("HEFT_TRANSPORT", "auto");
  if (transport != "auto" && transport != "tcp")
    throw InvalidArgument("HEFT_TRANSPORT: expected auto or tcp, found '" + transport + "'");
  o.shared_memory = transport == "auto";
  o.shm_chunk_bytes = static_cast<size_t>(
      env_number("HEFT_SHM_CHUNK_BYTES", static_cast<long long>(o.shm_chunk_bytes), 4096));
  if (o.shm_chunk_bytes % 64 != 0)
    throw InvalidArgument("HEFT_SHM_CHUNK_BYTES: expected a multiple of 64, found " +
                          std::to_string(o.shm_chunk_bytes));
  o.shm_small_bytes = static_cast<size_t>(
      env_number("HEFT_SHM_SMALL_BYTES", static_cast<long long>(o.shm_small_bytes), 0));
  o.shm_spin_us = static_cast<int>(env_number("HEFT_SHM_SPIN_US", o.shm_spin_us, -1));
  o.shm_contended_spin_us = static_cast<int>(
      env_number("HEFT_SHM_CONTENDED_SPIN_US", o.shm_contended_spin_us, 0));
  const std::string stream = env_or("HEFT_SHM_STREAM_SLOTS", "0");
  if (stream != "0" && stream != "1")
    throw InvalidArgument("HEFT_SHM_STREAM_SLOTS: expected 0 or 1, found '" + stream + "'");
  o.shm_stream_slots = stream == "1";
  const std::string placement = env_or("HEFT_SHM_PLACEMENT", "auto");
  if (placement != "auto" && placement != "near" && placement != "far")
    throw InvalidArgument("HEFT_SHM_PLACEMENT: expected auto, near or far, found '" + placement +
                          "'");
  o.shm_placement = placement == "near"  ? CommunicatorOptions::ShmPlacement::kNear
                    : placement == "far" ? CommunicatorOptions::ShmPlacement::kFar
                                         : CommunicatorOptions::ShmPlacement::kMeasure;
  o.shm_far_sync_ns =
      static_cast<int>(env_number("HEFT_SHM_FAR_NS", o.shm_far_sync_ns, 1));
  o.shm_probe_bytes = static_cast<size_t>(
      env_number("HEFT_SHM_PROBE_BYTES", static_cast<long long>(o.shm_probe_bytes), 1));
  const std::string single_copy = env_or("HEFT_SHM_SINGLE_COPY", "auto");
  if (single_copy != "auto" && single_copy != "1" && single_copy != "0")
    throw InvalidArgument("HEFT_SHM_SINGLE_COPY: expected auto, 1 or 0, found '" + single_copy + "'");
  o.shm_single_copy = single_copy == "auto" ? CommunicatorOptions::SingleCopy::kAuto
                      : single_copy == "1"  ? CommunicatorOptions::SingleCopy::kOn
                                            : CommunicatorOptions::SingleCopy::kOff;
  const std::string form = env_or("HEFT_SHM_FORM", "auto");
  const char* forms[] = {"auto", "direct", "slots", "single_copy"};
  const auto known = std::find(std::begin(forms), std::end(forms), form);
  if (known == std::end(forms))
    throw InvalidArgument("HEFT_SHM_FORM: expected auto, direct, slots or single_copy, found '" +
                          form + "'");
  o.shm_form = static_cast<CommunicatorOptions::ShmForm>(known - std::begin(forms));
  const std::string cores = env_or("HEFT_SHM_CORES", "auto");
  if (cores == "auto") {
    o.shm_core_group = -1;
  } else if (cores == "off") {
    o.shm_core_group = 0;
  } else {
    char* end = nullptr;
    const long k = std::strtol(cores.c_str(), &end, 10);
    if (cores.empty() || *end != '\0' || k < 1 || k > 1024)
      throw InvalidArgument("HEFT_SHM_CORES: expected auto, off or a group size from 1 to 1024, found '" +
                            cores + "'");
    o.shm_core_group = static_cast<int>(k);
  }
  o.shm_cores_min_bytes = static_cast<size_t>(env_number(
      "HEFT_SHM_CORES_MIN_BYTES", static_cast<long long>(o.shm_cores_min_bytes), 0));
  const std::string measure = env_or("HEFT_ALLREDUCE_MEASURE", "1");
  if (measure != "1" && measure != "0")
    throw InvalidArgument("HEFT_ALLREDUCE_MEASURE: expected 1 or 0, found '" + measure + "'");
  o.measure_allreduce = measure == "1";
  const std::string compression = env_or("HEFT_COMPRESSION", "none");
  if (compression != "none" && compression != "bf16")
    throw InvalidArgument("HEFT_COMPRESSION: expected none or bf16, found '" + compression + "'");
  o.compression = compression == "bf16" ? Compression::kBf16 : Compression::kNone;
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
