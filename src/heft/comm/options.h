// How a communicator is set up and which algorithms it runs: CommunicatorOptions, with
// defaults that suit loopback TCP and one shared-memory host, each overridable by an
// environment variable (from_env) so a launched job can be tuned without recompiling.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "heft/comm/store/store.h"

namespace heft::comm {

// The environment variable `var`, or `fallback` when it is unset or empty.
std::string env_or(const char* var, const std::string& fallback);

// The shared-memory slot size this machine gets by default: half of a core's L2 cache
// (sysconf), a multiple of 4 KiB, 64 KiB to 1 MiB; 256 KiB where the L2 size is unknown.
// Half the L2 keeps a piece and the peer's copy of it in L2 while both ranks work on it; on
// Zen 4 and 5 (1 MiB L2) that is 512 KiB, which ran 2 ranks at 1-16 MiB 9-19% faster than
// 256 KiB (fewer synchronisations, longer streams; docs/comm.md), and Zen 3's 512 KiB L2
// keeps the 256 KiB measured there. `l2_bytes` < 0: this machine's.
size_t default_shm_chunk_bytes(long l2_bytes = -1);

// Algorithms a caller may force; kAuto picks by size and topology (Communicator::
// allreduce_algorithm()). kShm and kHierarchical need ranks that share a host.
enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kTree, kChain, kShm, kHierarchical };
const char* name(Algorithm a);
// "auto", "ring", "recursive_doubling", "tree", "chain", "shm", "hierarchical"; throws
// heft::InvalidArgument listing them otherwise.
Algorithm parse_algorithm(const std::string& s);

// Wire compression of f32 allreduce. kDefault: what CommunicatorOptions::compression says.
enum class Compression { kDefault, kNone, kBf16 };

struct CommunicatorOptions {
  // The job token (HEFT_TOKEN); authenticates every peer connection. Must be non-empty.
  std::string token;
  // Deadline of each operation, from when it starts running; also bounds set-up.
  Millis timeout{std::chrono::seconds(300)};
  // Allreduce algorithm. kAuto: one host with shared memory -> kShm; several hosts, some
  // with several ranks -> kHierarchical up to small_message_bytes and, above, whichever of
  // kHierarchical and the flat kRing measured faster on these links (measure_allreduce);
  // otherwise recursive doubling up to small_message_bytes and the ring above.
  Algorithm allreduce_algorithm = Algorithm::kAuto;
  // Under kAuto over several hosts, per power-of-two size above small_message_bytes: the form
  // rank 0 recorded in an earlier run (choice_cache.h), else, before the first such call, time
  // both forms on a scratch buffer, keep the faster (slowest rank's time) on every rank and
  // record it, so later runs sum in the same order. Fast links make the ring win (the
  // hierarchical form's extra shared-memory passes cost more than the link time it saves),
  // slow links the hierarchical form. false: hierarchical at every size.
  bool measure_allreduce = true;
  // Broadcast algorithm. kAuto: kShm on one shared host, else tree up to
  // small_message_bytes and chain above.
  Algorithm broadcast_algorithm = Algorithm::kAuto;
  // The size at or below which latency beats bandwidth on TCP.
  size_t small_message_bytes = 64 << 10;
  // Whether this machine's links move that crossover for the flat TCP allreduce (from_env's
  // default, unless HEFT_SMALL_MESSAGE_BYTES gives a size; options built in code keep the
  // rule): ranks on hosts that share no memory, under kAuto, for sizes from 4 KiB to 1 MiB
  // (allreduce_plan.h's kMeasuredTcpMin/Max) recursive doubling or the ring by power-of-two
  // size, as rank 0's record has it, else timed at the first call of that size and recorded
  // (the rule's form unless the other is 10% faster). The broadcast and the hierarchical
  // form's exchange across hosts keep the rule.
  bool measure_small_messages = false;
  // Where this rank listens for peers (never wider than asked).
  std::string bind_address = "127.0.0.1";
  // The host this rank runs on; ranks with the same host share memory. Empty: HEFT_HOST,
  // else the machine's hostname.
  std::string host;
  // Use shared memory between ranks of one host (false: TCP only, for comparison).
  bool shared_memory = true;
  // Shared-memory pipeline chunk (bytes per slot area; see transport/shm/context.h): by
  // default from the L2 size (default_shm_chunk_bytes()).
  size_t shm_chunk_bytes = default_shm_chunk_bytes();
  // Up to this size the shared-memory allreduce has every rank reduce the whole chunk (one
  // synchronisation); above it, each rank reduces a slice (two, but n times less reading).
  size_t shm_small_bytes = 16 << 10;
  // Whether this machine's measurement moves that crossover (from_env's default, unless
  // HEFT_SHM_SMALL_BYTES gives a size; a CommunicatorOptions built in code keeps the rule): on
  // one shared-memory host under the auto form, for sizes from 1 KiB to 32 KiB
  // (allreduce_plan.h's kMeasuredSmallMin/Max) the small or the direct step by power-of-two
  // size, as the machine's record (choice_cache.h) has it, else timed at the first call of that
  // size and recorded; shm_small_bytes decides outside that range.
  bool measure_shm_small = false;
  // Microseconds a shared-memory wait spins before it yields and sleeps; -1 chooses from
  // the host's placement (transport/shm/context.h).
  int shm_spin_us = -1;
  // Microseconds a wait still spins in the contended mode where the ranks are on disjoint
  // cores (shm::ContextOptions::contended_spin_us); 0 sleeps at once, as before it existed.
  int shm_contended_spin_us = 50;
  // The direct form writes its slots with streaming stores (shm::ContextOptions::stream_slots)
  // in every placement; else only far.
  bool shm_stream_slots = false;
  // Whether the ranks' CPUs share a cache (shm::ContextOptions::placement): kMeasure probes
  // it every few calls (2 ranks on at least two CPUs; else near), kNear and kFar force it (kNear:
  // the cached stores of every call, as before the probe). Far, the direct form streams.
  enum class ShmPlacement { kMeasure, kNear, kFar };
  ShmPlacement shm_placement = ShmPlacement::kMeasure;
  // A probe's ns per sync from which it says far (shm::ContextOptions::far_sync_ns).
  int shm_far_sync_ns = 120;
  // Whether this machine's measurement classifies the probe's readings instead (from_env's
  // default, unless HEFT_SHM_FAR_NS gives a line; options built in code keep the line): on
  // one host of 2 ranks under the auto placement, each half-octave of readings (64-90 ns,
  // 90-128, 128-181, ...) takes the stores rank 0's record holds for it, else, at the first
  // answered probe of a call of at least kMeasuredFarMinBytes (allreduce_plan.h), the direct
  // form is timed with cached and with streamed stores and the line's answer kept unless the
  // other is 10% faster, and recorded; smaller calls take the line until then.
  bool measure_far_line = false;
  // Bytes since the last probe after which the next call probes again, as after 8 calls
  // (shm::ContextOptions::probe_bytes).
  size_t shm_probe_bytes = size_t{8} << 20;
  // Compression of f32 allreduce when a call does not say (HEFT_COMPRESSION none | bf16).
  Compression compression = Compression::kNone;
  // The large shared-memory allreduce form (algo/shm_allreduce.h). kAuto: kDirect at every
  // size above shm_small_bytes (the form moving the fewest bytes, docs/comm.md: a model, not
  // a measurement, so the choice never flips between runs); kSingleCopy: cross-memory
  // attach where the kernel allows it (else kDirect); kSlots: the two-copy segments.
  enum class ShmForm { kAuto, kDirect, kSlots, kSingleCopy };
  ShmForm shm_form = ShmForm::kAuto;
  // The older switch, used when shm_form is kAuto: kOn is ShmForm::kSingleCopy, kOff
  // ShmForm::kSlots, kAuto leaves the choice to shm_form.
  enum class SingleCopy { kAuto, kOn, kOff };
  SingleCopy shm_single_copy = SingleCopy::kAuto;
  // The form these two settings ask for (kAuto when neither forces one).
  ShmForm effective_shm_form() const;
  // Ranks that share a core (docs/comm.md, "Ranks that share a core"): above
  // shm_cores_min_bytes, a host's allreduce reduces among the ranks of each core first, then
  // across the cores' first ranks only, then shares the result on each core. The groups:
  // -1 (auto) from the CPUs each rank is bound to (ranks bound to one CPU each, some CPUs
  // with several: HEFT_BIND=pack), 0 never, k > 0 consecutive local ranks in groups of k
  // (tests and comparisons, whatever the binding).
  int shm_core_group = -1;
  size_t shm_cores_min_bytes = 128 << 10;
  // Whether this machine's measurement moves that crossover (from_env's default, unless
  // HEFT_SHM_CORES_MIN_BYTES gives a size; options built in code keep the rule): where the
  // cores' first ranks read far, for sizes from 32 KiB to 1 MiB (allreduce_plan.h's
  // kMeasuredCoresMin/Max) the core-grouped or the flat form by power-of-two size, as the
  // machine's record has it, else timed at the first call of that size and recorded.
  bool measure_shm_cores = false;

  // The defaults above overridden by the environment: HEFT_TOKEN, HEFT_TIMEOUT (seconds),
  // HEFT_ALLREDUCE_ALGO, HEFT_BROADCAST_ALGO, HEFT_SMALL_MESSAGE_BYTES (auto | bytes), HEFT_BIND_ADDRESS,
  // HEFT_HOST, HEFT_TRANSPORT (auto | tcp), HEFT_SHM_CHUNK_BYTES, HEFT_SHM_SMALL_BYTES (auto:
  // measured, the default here | bytes),
  // HEFT_SHM_SPIN_US, HEFT_SHM_CONTENDED_SPIN_US, HEFT_SHM_STREAM_SLOTS (0 | 1),
  // HEFT_SHM_PLACEMENT (auto | near | far), HEFT_SHM_FAR_NS (auto | ns),
  // HEFT_SHM_PROBE_BYTES, HEFT_SHM_FORM (auto | direct | slots | single_copy),
  // HEFT_SHM_SINGLE_COPY (auto | 1 | 0), HEFT_SHM_CORES (auto | off | k), HEFT_SHM_CORES_MIN_BYTES (auto | bytes),
  // HEFT_COMPRESSION (none | bf16),
  // HEFT_ALLREDUCE_MEASURE (1 | 0).
  // A malformed value throws heft::InvalidArgument naming the variable. measure_shm_small is
  // true unless HEFT_SHM_SMALL_BYTES gives a size, measure_shm_cores unless
  // HEFT_SHM_CORES_MIN_BYTES does, measure_small_messages unless HEFT_SMALL_MESSAGE_BYTES does,
  // measure_far_line unless HEFT_SHM_FAR_NS does.
  static CommunicatorOptions from_env();
};

}  // namespace heft::comm
