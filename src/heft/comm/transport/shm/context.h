// The shared-memory transport: one segment per rank of a host, mapped by every rank of that
// host, and sync(), the one primitive the shared-memory algorithms need.
//
// Terms. A *segment* (segment.h) holds a header and two *slots*; a slot is an `in` area and an
// `out` area of chunk_bytes each (plus 64 bytes, so a use can place its data at the *offset*
// (0..63) of the user's buffer mod 64: copies between the two then run aligned; and a gap that
// puts each out area about 2 KiB from every in area modulo 4 KiB, against 4K aliasing when a
// rank reduces from a peer's in area into its out area). Algorithms move data in *uses*: a use
// writes this rank's slot, calls sync(), then reads peers' slots (and may write `out`, sync
// again, read `out`). Uses alternate between the two slots (next_slot()), and that alone makes
// reuse safe: a rank writes slot s again only after passing the sync of the use in between,
// which every peer reaches only after it finished reading slot s.
//
// sync() is a barrier over an *epoch* counter per rank: publish epoch+1, wait for every peer
// to publish it. Waiting spins for a budget in microseconds, then yields, then sleeps on a
// futex on the peer's counter (timed, so a dead or aborted peer and the deadline are
// noticed). The budget follows the host's placement (each rank publishes the CPUs it may run
// on): ranks on disjoint cores spin long, ranks that may share cores spin briefly, and ranks
// that outnumber the cores they have yield at once, so they do not starve each other. A
// yield that takes a scheduler turn (other work on the core) makes the waits of the next
// 50 ms skip the yields and sleep at once instead (ContextOptions::slow_yield_us), after a
// brief spin where the ranks are on disjoint cores, until one such spin fails
// (ContextOptions::contended_spin_us).
// PathCounts counts how each wait ended.
//
// *Placement*: the host may run two ranks' CPUs near each other (a shared cache: a cache
// line's round trip 74-127 ns on the 2-vCPU VMs measured) or far (365-420 ns, over the
// interconnect), and moves them within seconds. far() says which holds now, from a *probe*:
// a few back-to-back syncs, timed (each costs about one cache-line hand-off: near 40-80 ns,
// far 150-250), taken by the host's ranks together at the first call and after probe_every
// calls or probe_bytes bytes since the last, local rank 0's measurement deciding for all (so
// every rank runs the same stores).
//
// Deliberately left out: point-to-point channels (the TCP mesh carries those), growing
// slots, cross-host anything.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/store/store.h"
#include "heft/comm/transport/shm/path_counts.h"
#include "heft/comm/transport/shm/segment.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm::shm {

// Where the ranks' CPUs sit (see the file comment): kMeasure probes; kNear and kFar force
// the answer (comparisons and tests: a test cannot choose the host's placement).
enum class Placement { kMeasure, kNear, kFar };

struct ContextOptions {
  // Bytes of each in / out area: the pipeline's chunk. Small enough to stay in L2 while all
  // ranks of the host work on it, large enough that a sync is rare.
  size_t chunk_bytes = 256 << 10;
  // Microseconds of busy-waiting, then `yields` sched_yield() calls, before sleeping on the
  // futex. Spinning wins when every rank has a core (a futex wake costs tens of µs); it
  // steals the peer's time when two ranks share one. spin_us < 0 chooses from the placement:
  // kSpinDisjointUs when every rank's CPU set is disjoint from the others', kSpinSharedUs
  // when the host's ranks fit the union of their CPUs, else 0 (yield at once).
  int spin_us = -1;
  int yields = 50;
  // A yield that takes longer than this handed the core to other work (a busy loop, another
  // job): for the next `contended_ms`, waits skip the spinning and yields and sleep on the
  // futex at once, so the kernel wakes this rank when its peer publishes (a woken sleeper
  // preempts a busy loop; a yielder waits for the busy loop's turn to end, every yield).
  int slow_yield_us = 500;
  int contended_ms = 50;
  // While contended, ranks on disjoint cores still spin up to this long (capped by spin_us)
  // before sleeping: the other work is on this rank's core, not the peer's, so the peer
  // usually arrives within microseconds, and sleeping at once made every sync of those
  // 50 ms a futex wake-up (2 ranks on a 2-vCPU VM, every wait sleeping: 1 MiB at 7-13
  // against 20-25 GB/s). About what a sleep and its wake-up cost, so a wait costs at most
  // twice the better of the two. After one such spin fails (the peer's core is busy too),
  // the rest of the contended time sleeps at once. Ranks that may share a core sleep at
  // once throughout, as before (their spinning takes the peer's turn).
  int contended_spin_us = 50;
  // Write the peers' pieces into this rank's slots with streaming (non-temporal) stores in
  // the direct form. Cached stores leave each line modified in this core's cache, so the
  // peer's read takes it from there and this rank's next write of the slot takes it back: two
  // cross-core transfers per line per use. The host of a 2-vCPU VM moves the vCPUs between
  // near and far cores within seconds; 2 ranks at 1-16 MiB, measured: far (a cache line's
  // round trip 365-420 ns) 7.7-8.4 streamed against 5.7-6.1 GB/s cached; near (74-127 ns)
  // 11-16 streamed against 16-25 cached, where the peer's read from L2/L3 is cheap and the
  // streamed data comes back from memory. Off: near is the usual state.
  // On regardless of this when far() says far.
  bool stream_slots = false;
  // The placement far() reports: measured (only where it can be: 2 ranks of a host on at
  // least two CPUs, Context::probe; elsewhere near), or forced.
  Placement placement = Placement::kMeasure;
  // A probe whose syncs took at least this long each (the best of two batches) means far.
  // Measured on the 2-vCPU Zen 5 VM: near 40-80 ns, far 150-250 ns per sync. Where a far
  // classifier is set (Context::set_far_classifier), it decides instead and is told this
  // line's answer.
  int far_sync_ns = 120;
  // far() probes at its first call, then after probe_every calls or probe_bytes bytes since
  // the last probe, whichever comes first; between, it keeps the answer. A probe costs about
  // 10 syncs (1-3 µs): every 8 calls, under 1% of a 256 KiB allreduce; every 8 MiB, under 1%
  // of the calls it covers, and a change of placement is seen within one call from 4 MiB
  // (within 8 calls, it left 7 of a size's 25 calls on the wrong stores). probe_every 0:
  // only probe_placement() probes.
  int probe_every = 8;
  size_t probe_bytes = size_t{8} << 20;
  // Use cross-memory attach (single-copy reads of peers' buffers) where the kernel allows.
  bool single_copy = true;
  // The job token: signs the segment names published in the store (store/signed_value.h),
  // so that a rank maps only segments its peers named, whatever store carries the names.
  std::string token;
};

constexpr int kSpinDisjointUs = 500;
constexpr int kSpinSharedUs = 50;

class Context {
 public:
  // Creates this rank's segment, opens its peers' (names exchanged through `store` under
  // "<group>/shm/"), then unlinks the names once every rank mapped every segment.
  // `global_ranks[i]` is local rank i's rank in the communicator (for error messages).
  static std::unique_ptr<Context> create(Store& store, const std::string& group, int local_rank,
                                         std::vector<int> global_ranks,
                                         const ContextOptions& options, Deadline deadline);
  ~Context();

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(segments_.size()); }
  size_t chunk_bytes() const { return options_.chunk_bytes; }

  // The slot of the next use (alternates 0, 1, 0, ...; identical on every rank).
  int next_slot() { return slot_++ & 1; }
  // The slot areas of `local_rank`, at the offset it placed this use's data at (0 until it
  // calls place()).
  uint8_t* in(int local_rank, int slot) const;
  uint8_t* out(int local_rank, int slot) const;
  // Places this rank's data of `slot` at `offset` (< 64) into its areas; peers see it after
  // the next sync(). Call before writing the slot.
  void place(int slot, size_t offset);
  // The spin budget in force, after placement (ContextOptions::spin_us).
  int spin_us() const { return options_.spin_us; }
  // Whether this rank's CPU set is disjoint from every peer's (e.g. bound one per core).
  bool placement_disjoint() const { return disjoint_; }
  // The one CPU local rank `local_rank` is bound to, -1 when it may run on several.
  int single_cpu(int local_rank) const;
  // The order in which the direct form folds the host's data (shm_allreduce.h): groups of
  // local ranks, each folded in its order, then the groups' results in theirs; empty (the
  // default): local-rank order. The communicator sets the core groups (topology.h), so the
  // direct form and the core-grouped allreduce add alike and give the same bits. The same
  // on every rank of the host.
  void set_fold_groups(std::vector<std::vector<int>> groups) { fold_groups_ = std::move(groups); }
  const std::vector<std::vector<int>>& fold_groups() const { return fold_groups_; }

  using Signature = CallSignature;

  // Whether the host's ranks run far apart now (ContextOptions::placement): forced, or
  // measured by a probe at the points ContextOptions::probe_every and probe_bytes set (every
  // rank of the host must call it at the same points of the same operations, as it calls
  // sync()), for a call that moves `bytes`. The same answer on every rank. `signature` as
  // for sync(), only where probes_next(): the probe is then the operation's first sync.
  // Throws as sync(). Counted in PathCounts::probes and far (syncs does not count the
  // probe's).
  bool far(Deadline deadline, const std::string& op, size_t bytes,
           const Signature* signature = nullptr);
  // Whether the next far() probes (synchronises): identical on every rank, from the calls
  // before it only (a call that other ranks made with another size still probes on all).
  bool probes_next() const;
  // Probes now (every rank of the context together, as far() does at its probes) and keeps
  // the answer for far(); the forced answer where the placement is not measured. With
  // probe_every 0, far() never probes by itself: the caller decides when (the first ranks of
  // cores, communicator.cc).
  bool probe_placement(Deadline deadline, const std::string& op);

  // Decides far or near from an answered probe instead of ContextOptions::far_sync_ns: given
  // the reading (local rank 0's ns per sync, the same on every rank), the line's answer, the
  // call's bytes (0 for probe_placement()) and the operation. Called on every rank of the host
  // at the same probe, after it (the call's first sync); it may synchronise and run
  // collectives of its own (the communicator times both stores, allreduce_choice.cc). Its
  // answer is kept as a probe's is. Throws as sync().
  using FarClassifier =
      std::function<bool(uint32_t ns, bool line_far, size_t bytes, Deadline deadline, const std::string& op)>;
  void set_far_classifier(FarClassifier classify) { classify_far_ = std::move(classify); }

  // Barrier among the host's ranks (see the file comment). Throws heft::PeerLost when a peer
  // aborted or `liveness` reports it gone, heft::Timeout at the deadline; both name the peer
  // by its communicator rank and `op`. With `signature` (the first sync of an operation, on
  // every rank), also checks that every peer made the same call: heft::InvalidArgument
  // naming the peer and both counts otherwise (a caller's bug that would else go on with
  // mismatched buffers).
  void sync(Deadline deadline, const std::string& op, const Signature* signature = nullptr);

  // Called about every 10 ms while waiting for local rank `peer`; throws to give up (the
  // communicator checks the peer's TCP link for a close).
  void set_liveness_check(std::function<void(int local_peer, const std::string& op)> check) {
    liveness_ = std::move(check);
  }

  // Marks this rank aborted and wakes every waiter, so peers fail now. Thread-safe.
  void abort();

  // Single-copy access to peers' private memory (cross-memory attach, process_vm_readv):
  // available when every rank of the host could read every other at set-up (the kernel
  // may forbid it: Yama, seccomp). The same answer on every rank of the host.
  bool cma_available() const { return cma_; }
  bool stream_slots() const { return options_.stream_slots; }
  // Publishes the address of this rank's buffer for the current operation (read by peers
  // after the next sync()).
  void publish_buffer(const void* address);
  // The address local rank `peer` published (in its address space; for alignment only).
  uint64_t peer_buffer(int peer) const;
  // Copies `bytes` from local rank `peer`'s published buffer at `offset` into `dst`. Throws
  // heft::PeerLost when the peer is gone or aborted (a peer that failed the operation
  // frees the buffer being read), heft::IoError on other failures.
  void read_peer(int peer, size_t offset, void* dst, size_t bytes, const std::string& op);
  // A scratch area of at least `bytes` owned by this context, starting at `offset` mod 64
  // (so a copy into it from a buffer at that offset runs aligned). Reused across calls; a
  // second index gives a second, independent area.
  uint8_t* scratch(size_t bytes, size_t offset = 0, int index = 0);

  // How this rank's allreduces went (shm_allreduce.cc counts them).
  PathCounts& path_counts() { return counts_; }
  const PathCounts& path_counts() const { return counts_; }

 private:
  Context(int rank, std::vector<int> global_ranks, const ContextOptions& options);
  struct Header;
  Header& header(int local_rank) const;
  void wait_for(int peer, uint32_t epoch, Deadline deadline, const std::string& op);
  // sync() without counting it in PathCounts::syncs.
  void barrier(Deadline deadline, const std::string& op, const Signature* signature);
  // One probe (for a call of `bytes`, 0 from probe_placement): the line's answer, or the
  // classifier's where set; the last answer where this one could not be answered.
  bool probe(Deadline deadline, const std::string& op, const Signature* signature, size_t bytes);
  void probe_cma(Store& store, const std::string& group, Millis timeout);

  int rank_;
  std::vector<int> global_ranks_;
  ContextOptions options_;
  std::vector<Segment> segments_;  // by local rank; segments_[rank_] is ours
  uint32_t epoch_ = 0;
  uint32_t slot_ = 0;
  // Until then waits sleep at once (ContextOptions::slow_yield_us).
  std::chrono::steady_clock::time_point contended_until_{};
  // A contended spin failed since: the waits until contended_until_ sleep at once.
  bool contended_spin_failed_ = false;
  std::function<void(int, const std::string&)> liveness_;
  void choose_spin();

  bool cma_ = false;
  bool disjoint_ = false;
  bool measure_placement_ = false;
  FarClassifier classify_far_;     // unset: the line (far_sync_ns) decides
  bool far_ = false;              // the last probe's answer
  bool probed_ = false;            // a probe ran (far() probes at its first call)
  uint64_t calls_since_probe_ = 0;  // far() calls since the last probe
  uint64_t bytes_since_probe_ = 0;  // and their bytes
  PathCounts counts_;
  std::vector<uint8_t> scratch_[2];
  std::vector<std::vector<int>> fold_groups_;
};

}  // namespace heft::comm::shm
