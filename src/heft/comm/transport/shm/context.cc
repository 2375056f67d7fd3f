#include "heft/comm/transport/shm/context.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <functional>

#include <spdlog/spdlog.h>

#include "heft/check.h"
#include "heft/comm/cpu.h"
#include "heft/comm/store/signed_value.h"
#include "heft/error.h"

namespace heft::comm::shm {

// Each field on its own cache line: the epoch is written by its owner and polled by every
// peer; keeping the others away from it avoids false sharing.
struct Context::Header {
  alignas(64) std::atomic<uint32_t> epoch;
  alignas(64) std::atomic<uint32_t> waiters;  // peers sleeping on epoch's futex
  alignas(64) std::atomic<uint32_t> aborted;
  alignas(64) int32_t pid;            // written once at set-up
  uint64_t self_address;              // where the owner maps this header (CMA probe)
  std::atomic<uint64_t> buffer;       // the owner's buffer of the current operation
  std::atomic<uint32_t> offset[2];    // where the owner placed each slot's data (place())
  // The call the owner's operation beginning at an epoch of parity i was made with
  // (Signature), for sync() to check against every peer's.
  std::atomic<uint64_t> signature[2];
  std::atomic<uint64_t> signature_count[2];
  cpu_set_t cpus;                     // the CPUs the owner may run on, written at set-up
  // Local rank 0's last placement probe, ns per sync (Context::probe).
  alignas(64) std::atomic<uint32_t> probe_ns;
  // The CPU the owner ran its last probe on, -1 where it moved during it (Context::probe).
  std::atomic<int32_t> probe_cpu;
};

namespace {

constexpr size_t kHeaderBytes = 4096;
// Syncs in each of a probe's two timed batches (Context::probe).
constexpr int kProbeSyncs = 4;
// A probe's sync this slow timed a scheduler's turn, not a cache hand-off (150-420 ns far):
// ranks free to move then had another thread on one of their CPUs (DDP's backward beside its
// communicator's thread: 0.6-22 µs per sync measured), and the probe has no answer.
constexpr uint32_t kSchedulerTurnNs = 1000;
static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words are 32-bit");
// Room after each area for data placed at an offset up to 63.
constexpr size_t kPlacement = 64;

// Each area is followed by room for the placement and a gap, so that a slot's out area lies
// about 2 KiB from every in area modulo 4 KiB (with chunk_bytes a multiple of 4 KiB): the
// direct form reduces from a peer's in area into its out area, and 1-256 bytes between
// them would make every load wait on 4K aliasing (reduce.h's orders).
constexpr size_t kAliasGap = 2048 - kPlacement;
size_t area_bytes(const ContextOptions& o) { return o.chunk_bytes + kPlacement + kAliasGap; }
size_t segment_bytes(const ContextOptions& o) { return kHeaderBytes + 4 * area_bytes(o); }

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, long nanos) {
  timespec ts{0, nanos};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins up to `us` microseconds for `epoch` to reach `target`; whether it did.
bool spin_until(const std::atomic<uint32_t>& epoch, uint32_t target, int us) {
  using Clock = std::chrono::steady_clock;
  // Look at the clock every 64 pauses (a pause is 10-100 ns; the clock read about 20).
  const auto until = Clock::now() + std::chrono::microseconds(us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (reached(epoch.load(std::memory_order_acquire), target)) return true;
      cpu_relax();
    }
    if (Clock::now() >= until) return false;
  }
}

std::string segment_name(const std::string& group, int local_rank) {
  // Names may not contain '/' after the first character: hash the group, add the pid so a
  // stale segment of a crashed run never collides.
  return "/heft-" + std::to_string(std::hash<std::string>{}(group)) + "-" +
         std::to_string(local_rank) + "-" + std::to_string(getpid());
}

}  // namespace

Context::Context(int rank, std::vector<int> global_ranks, const ContextOptions& options)
    : rank_(rank), global_ranks_(std::move(global_ranks)), options_(options) {}

Context::~Context() = default;

std::unique_ptr<Context> Context::create(Store& store, const std::string& group, int local_rank,
                                         std::vector<int> global_ranks,
                                         const ContextOptions& options, Deadline deadline) {
  const int n = static_cast<int>(global_ranks.size());
  HEFT_CHECK(local_rank >= 0 && local_rank < n, "local rank ", local_rank, " of ", n);
  HEFT_CHECK(options.chunk_bytes >= 4096 && options.chunk_bytes % 64 == 0,
             "shm chunk_bytes must be a multiple of 64, at least 4096: ", options.chunk_bytes);
  std::unique_ptr<Context> ctx(new Context(local_rank, std::move(global_ranks), options));
  ctx->segments_.resize(n);
  const size_t bytes = segment_bytes(options);
  Segment own = Segment::create(segment_name(group, local_rank), bytes);
  {
    Header& h = *reinterpret_cast<Header*>(own.data());
    h.pid = getpid();
    h.self_address = reinterpret_cast<uint64_t>(own.data());
    if (sched_getaffinity(0, sizeof(h.cpus), &h.cpus) != 0) {
      CPU_ZERO(&h.cpus);
      for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &h.cpus);  // unknown: may run anywhere
    }
  }
  // Under Yama's ptrace_scope 1, siblings may read each other only if they allow it.
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  set_signed(store, options.token, group + "/shm/" + std::to_string(local_rank), own.name());
  for (int p = 0; p < n; ++p) {
    if (p == local_rank) continue;
    ctx->segments_[p] = Segment::open(
        get_signed(store, options.token, group + "/shm/" + std::to_string(p), time_left(deadline)),
        bytes);
  }
  // Every rank has mapped every segment once all "mapped" keys exist: unlink the names now,
  // so a crash from here on leaves nothing behind in /dev/shm.
  store.set(group + "/shm-mapped/" + std::to_string(local_rank), "1");
  std::vector<std::string> keys;
  for (int p = 0; p < n; ++p) keys.push_back(group + "/shm-mapped/" + std::to_string(p));
  store.wait(keys, time_left(deadline));
  own.unlink();
  ctx->segments_[local_rank] = std::move(own);
  // What the kernels ask on first use (CPU features, /sys), asked now, so that the first
  // collective does not pay for it.
  kernel_isa();
  last_level_cache_bytes();
  ctx->choose_spin();
  ctx->probe_cma(store, group, time_left(deadline));
  return ctx;
}

int Context::single_cpu(int local_rank) const {
  const cpu_set_t& cpus = header(local_rank).cpus;
  if (CPU_COUNT(&cpus) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &cpus)) return c;
  return -1;
}

// The spin budget from the host's placement (every header's CPU set is written before its
// name was published, so all are visible here).
void Context::choose_spin() {
  cpu_set_t all, others;
  CPU_ZERO(&all);
  CPU_ZERO(&others);
  for (int p = 0; p < size(); ++p) {
    CPU_OR(&all, &all, &header(p).cpus);
    if (p != rank_) CPU_OR(&others, &others, &header(p).cpus);
  }
  cpu_set_t shared;
  CPU_AND(&shared, &others, &header(rank_).cpus);
  disjoint_ = CPU_COUNT(&shared) == 0;
  // Two ranks on at least two CPUs: a probe's syncs time the cache hand-off between the two
  // CPUs they run on, and not a scheduler's turn, on disjoint CPUs always, free to move
  // (as torchrun or mp.spawn start them) where they run on two at the time (probe()). The
  // same on both ranks (the CPU sets are every rank's).
  measure_placement_ =
      options_.placement == Placement::kMeasure && size() == 2 && CPU_COUNT(&all) >= 2;
  if (options_.spin_us >= 0) return;
  if (CPU_COUNT(&all) < size()) {
    // More ranks than cores: no spinning, so the peer being waited for gets the core. A
    // yield hands it over in about a microsecond where a futex sleep and wake cost tens
    // (measured: 4 ranks on 2 cores, 1 MiB, 305-368 µs yielding against 431-1181 µs
    // sleeping at once); the futex still comes after the yields.
    options_.spin_us = 0;
  } else {
    options_.spin_us = disjoint_ ? kSpinDisjointUs : kSpinSharedUs;
  }
}

// Every rank tries a single-copy read of each peer's header; CMA is used only if all
// succeeded everywhere, so every rank picks the same algorithms.
void Context::probe_cma(Store& store, const std::string& group, Millis timeout) {
  bool ok = options_.single_copy;
  for (int p = 0; p < size() && ok; ++p) {
    if (p == rank_) continue;
    // Read the peer's self_address field through the peer's own mapping of its header: it
    // holds that mapping's address, which a successful read proves.
    const Header& h = header(p);
    const auto field = static_cast<uint64_t>(reinterpret_cast<const uint8_t*>(&h.self_address) -
                                             reinterpret_cast<const uint8_t*>(&h));
    uint64_t probe = 0;
    iovec local{&probe, sizeof(probe)};
    iovec remote{reinterpret_cast<void*>(h.self_address + field), sizeof(probe)};
    ok = process_vm_readv(header(p).pid, &local, 1, &remote, 1, 0) == sizeof(probe) &&
         probe == header(p).self_address;
  }
  store.set(group + "/cma/" + std::to_string(rank_), ok ? "1" : "0");
  cma_ = true;
  for (int p = 0; p < size(); ++p)
    cma_ = store.get_string(group + "/cma/" + std::to_string(p), timeout) == "1" && cma_;
}

void Context::publish_buffer(const void* address) {
  header(rank_).buffer.store(reinterpret_cast<uint64_t>(address), std::memory_order_relaxed);
}

uint64_t Context::peer_buffer(int peer) const {
  return header(peer).buffer.load(std::memory_order_relaxed);
}

void Context::read_peer(int peer, size_t offset, void* dst, size_t bytes, const std::string& op) {
  auto* out = static_cast<uint8_t*>(dst);
  uint64_t from = header(peer).buffer.load(std::memory_order_relaxed) + offset;
  while (bytes > 0) {
    iovec local{out, bytes};
    iovec remote{reinterpret_cast<void*>(from), bytes};
    ssize_t n = process_vm_readv(header(peer).pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      const int err = errno;
      const int me = global_ranks_[rank_], them = global_ranks_[peer];
      if (n < 0 && err == ESRCH) throw PeerLost(me, them, op, "its process is gone");
      // A peer that failed the operation (another rank lost) aborts before it returns and
      // frees the buffer being read: the read then faults, and the loss is what to report.
      if (header(peer).aborted.load(std::memory_order_acquire))
        throw PeerLost(me, them, op, "its shared-memory communicator was aborted");
      errno = err;
      throw IoError("rank " + std::to_string(me) + ": " + op + ": reading rank " +
                    std::to_string(them) + "'s memory: " + errno_string(errno));
    }
    out += n;
    from += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

uint8_t* Context::scratch(size_t bytes, size_t offset, int index) {
  std::vector<uint8_t>& area = scratch_[index & 1];
  if (area.size() < bytes + 2 * kPlacement) area.resize(bytes + 2 * kPlacement);
  const auto base = reinterpret_cast<uintptr_t>(area.data());
  const uintptr_t aligned = (base + kPlacement - 1) & ~uintptr_t{kPlacement - 1};
  return reinterpret_cast<uint8_t*>(aligned + (offset % kPlacement));
}

void Context::place(int slot, size_t offset) {
  HEFT_CHECK(offset < kPlacement, "shm placement offset ", offset);
  header(rank_).offset[slot & 1].store(static_cast<uint32_t>(offset), std::memory_order_relaxed);
}

Context::Header& Context::header(int local_rank) const {
  return *reinterpret_cast<Header*>(segments_[local_rank].data());
}

uint8_t* Context::in(int local_rank, int slot) const {
  const size_t offset = header(local_rank).offset[slot & 1].load(std::memory_order_relaxed);
  return segments_[local_rank].data() + kHeaderBytes + slot * 2 * area_bytes(options_) + offset;
}

uint8_t* Context::out(int local_rank, int slot) const {
  return in(local_rank, slot) + area_bytes(options_);
}

bool Context::probes_next() const {
  return measure_placement_ && options_.probe_every > 0 &&
         (!probed_ || calls_since_probe_ >= static_cast<uint64_t>(options_.probe_every) ||
          bytes_since_probe_ >= options_.probe_bytes);
}

bool Context::probe_placement(Deadline deadline, const std::string& op) {
  if (!measure_placement_) return options_.placement == Placement::kFar;
  far_ = probe(deadline, op, nullptr, 0);
  return far_;
}

bool Context::far(Deadline deadline, const std::string& op, size_t bytes,
                  const Signature* signature) {
  HEFT_CHECK(!signature || probes_next(), "a signature for far() without a probe");
  bool far = options_.placement == Placement::kFar;
  if (measure_placement_) {
    if (probes_next()) far_ = probe(deadline, op, signature, bytes);
    ++calls_since_probe_;
    bytes_since_probe_ += bytes;
    far = far_;
  }
  counts_.far += far;
  return far;
}

// One untimed sync (the ranks arrive together), two timed batches of kProbeSyncs, then local
// rank 0 publishes its best batch's time per sync, each rank the CPU it ran the probe on, and
// one more sync hands them to every rank. A batch in which a rank lost its core (a
// scheduler's turn, a page fault) is the slower one; a placement change within the probe
// leaves the answer of either. Ranks free to move (not on disjoint CPUs) time a cache
// hand-off only while they run on two CPUs with nothing else: where they shared one, one
// moved during the probe, or its syncs took a scheduler's turn (kSchedulerTurnNs), it has no
// answer and the last one holds (PathCounts::unanswered).
bool Context::probe(Deadline deadline, const std::string& op, const Signature* signature, size_t bytes) {
  using Clock = std::chrono::steady_clock;
  ++counts_.probes;
  probed_ = true;
  calls_since_probe_ = bytes_since_probe_ = 0;
  const int cpu = sched_getcpu();
  barrier(deadline, op, signature);
  auto best = Clock::duration::max();
  for (int batch = 0; batch < 2; ++batch) {
    const auto start = Clock::now();
    for (int i = 0; i < kProbeSyncs; ++i) barrier(deadline, op, nullptr);
    best = std::min(best, Clock::now() - start);
  }
  if (rank_ == 0) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(best).count();
    header(0).probe_ns.store(static_cast<uint32_t>(std::min<int64_t>(ns / kProbeSyncs, INT32_MAX)),
                             std::memory_order_relaxed);
  }
  header(rank_).probe_cpu.store(sched_getcpu() == cpu ? cpu : -1, std::memory_order_relaxed);
  // Each rank overwrites its fields only in or after its next probe's timed batches, which
  // need every peer past its reads below.
  barrier(deadline, op, nullptr);
  const int cpu0 = header(0).probe_cpu.load(std::memory_order_relaxed);
  const int cpu1 = header(1).probe_cpu.load(std::memory_order_relaxed);
  const uint32_t ns = header(0).probe_ns.load(std::memory_order_relaxed);
  if (!disjoint_ && (cpu0 < 0 || cpu1 < 0 || cpu0 == cpu1 || ns >= kSchedulerTurnNs)) {
    ++counts_.unanswered;
    return far_;
  }
  counts_.probe_ns = ns;
  const bool line_far = counts_.probe_ns >= static_cast<uint64_t>(options_.far_sync_ns);
  const bool far = classify_far_ ? classify_far_(ns, line_far, bytes, deadline, op) : line_far;
  if (far != far_ || counts_.probes - counts_.unanswered == 1)
    spdlog::debug("rank {}: shared-memory placement {} ({} ns per sync, {})", global_ranks_[rank_],
                  far ? "far" : "near", counts_.probe_ns,
                  classify_far_ ? std::string("as this machine's record has it")
                                : "far from " + std::to_string(options_.far_sync_ns));
  return far;
}

void Context::sync(Deadline deadline, const std::string& op, const Signature* signature) {
  ++counts_.syncs;
  barrier(deadline, op, signature);
}

void Context::barrier(Deadline deadline, const std::string& op, const Signature* signature) {
  const uint32_t target = ++epoch_;
  Header& self = header(rank_);
  // A peer writes the signature of its operation that begins at epoch e before publishing
  // e, and can write the next one of that parity (e + 2 or later) only after passing e + 1,
  // which needs this rank past its check here: the pair of parities is enough.
  const int parity = static_cast<int>(target & 1);
  if (signature) {
    self.signature[parity].store(signature->call, std::memory_order_relaxed);
    self.signature_count[parity].store(signature->count, std::memory_order_relaxed);
  }
  self.epoch.store(target, std::memory_order_seq_cst);
  if (self.waiters.load(std::memory_order_seq_cst) > 0) futex_wake_all(&self.epoch);
  for (int p = 0; p < size(); ++p)
    if (p != rank_) wait_for(p, target, deadline, op);
  if (!signature) return;
  for (int p = 0; p < size(); ++p) {
    if (p == rank_) continue;
    const Header& h = header(p);
    if (h.signature[parity].load(std::memory_order_relaxed) == signature->call) continue;
    throw InvalidArgument(call_mismatch(global_ranks_[rank_], op, global_ranks_[p],
                                        h.signature_count[parity].load(std::memory_order_relaxed),
                                        *signature));
  }
}

void Context::wait_for(int peer, uint32_t target, Deadline deadline, const std::string& op) {
  Header& h = header(peer);
  if (reached(h.epoch.load(std::memory_order_acquire), target)) return;
  using Clock = std::chrono::steady_clock;
  const bool contended = Clock::now() < contended_until_;
  // While contended, ranks on disjoint cores still spin briefly: the other work on this core
  // never holds up the peer, which usually arrives within microseconds, and a wait that
  // slept costs a futex wake-up (tens of µs on a VM) on every sync of that time. Once such
  // a spin failed (the peer's core is busy too), the rest of the time sleeps at once.
  const int spin = !contended                              ? options_.spin_us
                   : disjoint_ && !contended_spin_failed_ ? std::min(options_.spin_us,
                                                                     options_.contended_spin_us)
                                                          : 0;
  if (spin > 0) {
    if (spin_until(h.epoch, target, spin)) {
      ++counts_.spun;
      return;
    }
    if (contended) contended_spin_failed_ = true;
  }
  for (int i = 0; i < options_.yields && !contended; ++i) {
    if (reached(h.epoch.load(std::memory_order_acquire), target)) {
      ++counts_.yielded;
      return;
    }
    const auto before = Clock::now();
    sched_yield();
    const auto after = Clock::now();
    if (after - before > std::chrono::microseconds(options_.slow_yield_us)) {
      contended_until_ = after + std::chrono::milliseconds(options_.contended_ms);
      contended_spin_failed_ = false;
      ++counts_.contended;
      break;
    }
  }
  h.waiters.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    Header& h;
    ~Leave() { h.waiters.fetch_sub(1, std::memory_order_seq_cst); }
  } leave{h};
  for (;;) {
    const uint32_t v = h.epoch.load(std::memory_order_seq_cst);
    if (reached(v, target)) return;
    const int me = global_ranks_[rank_], them = global_ranks_[peer];
    if (h.aborted.load(std::memory_order_acquire))
      throw PeerLost(me, them, op, "its shared-memory communicator was aborted");
    if (std::chrono::steady_clock::now() >= deadline)
      throw Timeout("rank " + std::to_string(me) + ": " + op +
                    " timed out waiting for rank " + std::to_string(them) +
                    " (shared memory, epoch " + std::to_string(target) + ")", them);
    if (liveness_) liveness_(peer, op);
    ++counts_.slept;
    futex_wait(&h.epoch, v, 10'000'000);  // 10 ms, then look at the peer and deadline again
  }
}

void Context::abort() {
  if (segments_.empty() || !segments_[rank_].data()) return;
  Header& self = header(rank_);
  self.aborted.store(1, std::memory_order_seq_cst);
  self.epoch.fetch_add(0, std::memory_order_seq_cst);
  futex_wake_all(&self.epoch);
}

}  // namespace heft::comm::shm

