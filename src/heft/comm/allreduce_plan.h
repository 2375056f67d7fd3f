// One allreduce's plan: everything that decides how it runs, chosen in one place
// (Communicator::Impl::plan_allreduce, communicator.cc) before any byte moves, from the size,
// the topology, the options, the record of earlier runs (choice_cache.h) and the placement
// probes (shm/context.h). The algorithms (algo/) and transports carry a plan out and decide
// nothing of their own; what a call reports (Communicator::last_allreduce_plan, its path())
// is the plan it ran, not a reading of counters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "heft/comm/options.h"

namespace heft::comm {

// The shared-memory step of a plan (algo/shm_allreduce.h has the forms' costs).
enum class ShmStep {
  kNone,        // no shared-memory step (ring, recursive doubling, hierarchical's leaders)
  kSmall,       // every rank reduces whole chunks through the slots (latency)
  kDirect,      // peers' slices into the slots, own slice reduced in place (the default)
  kSlots,       // reduce-scatter + allgather through the slots
  kSingleCopy,  // reads of the peers' buffers (cross-memory attach)
  kCores,       // reduced on each core, then across the cores' first ranks
};
// "none", "small", "direct", "slots", "single_copy", "cores".
const char* name(ShmStep s);

struct AllreducePlan {
  Algorithm algorithm = Algorithm::kAuto;  // kRing, kRecursiveDoubling, kShm or kHierarchical
  ShmStep shm = ShmStep::kNone;            // the host's step (kShm; kHierarchical's, if any)
  bool far = false;  // kDirect: the ranks' CPUs sit far apart, its slots written streamed
  size_t bytes = 0;  // the call's size

  // "shm/direct", "shm/small", "shm/slots", "shm/single_copy", "shm/cores",
  // "hierarchical(shm/direct)", "hierarchical(leaders)", "recursive_doubling", "ring"
  // (empty for a default plan: before the first allreduce).
  std::string path() const;
  bool operator==(const AllreducePlan& o) const {
    return algorithm == o.algorithm && shm == o.shm && far == o.far && bytes == o.bytes;
  }
};

// The sizes whose shared-memory step (small or direct) a machine measures and records when
// CommunicatorOptions::measure_shm_small: bytes in (kMeasuredSmallMin, kMeasuredSmallMax].
constexpr size_t kMeasuredSmallMin = 1 << 10;
constexpr size_t kMeasuredSmallMax = 32 << 10;
inline bool measured_small_size(size_t bytes) {
  return bytes > kMeasuredSmallMin && bytes <= kMeasuredSmallMax;
}

// The sizes whose form, where ranks share cores and their first ranks read far (core-grouped or
// flat), a machine measures and records when CommunicatorOptions::measure_shm_cores: bytes in
// (kMeasuredCoresMin, kMeasuredCoresMax].
constexpr size_t kMeasuredCoresMin = 32 << 10;
constexpr size_t kMeasuredCoresMax = 1 << 20;
inline bool measured_cores_size(size_t bytes) {
  return bytes > kMeasuredCoresMin && bytes <= kMeasuredCoresMax;
}

// The sizes whose TCP form (recursive doubling or the ring, ranks on hosts that share no
// memory) a machine measures and records when CommunicatorOptions::measure_small_messages:
// bytes in (kMeasuredTcpMin, kMeasuredTcpMax].
constexpr size_t kMeasuredTcpMin = 4 << 10;
constexpr size_t kMeasuredTcpMax = 1 << 20;
inline bool measured_tcp_size(size_t bytes) { return bytes > kMeasuredTcpMin && bytes <= kMeasuredTcpMax; }

// The smallest call whose first probe, where its reading's half-octave is not yet decided,
// times the direct form's two stores (CommunicatorOptions::measure_far_line): below it the
// stores' difference is within a call's noise.
constexpr size_t kMeasuredFarMinBytes = 256 << 10;
// A probe's reading's class: its half-octave, floor(2 log2(ns)) (64-90 ns: 12, 90-128: 13,
// 128-181: 14, ...), 0 for 0.
int far_reading_bucket(uint64_t ns);

// The shared-memory step a flat allreduce of `bytes` takes on a host under these options
// (no measurement: `small_bytes` and the form asked for; single copy only where the kernel
// allows it, else direct).
ShmStep flat_shm_step(size_t bytes, size_t small_bytes, CommunicatorOptions::ShmForm form,
                      bool single_copy_available);

}  // namespace heft::comm
