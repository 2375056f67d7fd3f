// The shared-memory transport: one segment per rank of a host, mapped by every rank of that
// host, and sync(), the one primitive the shared-memory algorithms need.
//
// Terms. A *segment* (segment.h) holds a header and two *slots*; a slot is an `in` area and
// an `out` area of chunk_bytes each. Algorithms move data in *uses*: a use writes this
// rank's slot, calls sync(), then reads peers' slots (and may write `out`, sync again, read
// `out`). Uses alternate between the two slots (next_slot()), and that alone makes reuse
// safe: a rank writes slot s again only after passing the sync of the use in between, which
// every peer reaches only after it finished reading slot s.
//
// sync() is a barrier over an *epoch* counter per rank: publish epoch+1, wait for every peer
// to publish it. Waiting spins briefly, then yields, then sleeps on a futex on the peer's
// counter (timed, so a dead or aborted peer and the deadline are noticed), so more ranks than
// cores do not starve each other.
//
// Deliberately left out: point-to-point channels (the TCP mesh carries those), growing
// slots, cross-host anything.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/store/store.h"
#include "heft/comm/transport/shm/segment.h"
#include "heft/comm/transport/transport.h"

namespace heft::comm::shm {

struct ContextOptions {
  // Bytes of each in / out area: the pipeline's chunk. Small enough to stay in L2 while all
  // ranks of the host work on it, large enough that a sync is rare.
  size_t chunk_bytes = 256 << 10;
  // Busy-wait iterations, then sched_yield() calls, before sleeping on the futex. Spinning
  // wins when every rank has a core; yielding is what lets oversubscribed ranks make
  // progress. spin < 0: 20000 when the host's ranks fit the cores this process may use,
  // else 100.
  int spin = -1;
  int yields = 50;
  // Use cross-memory attach (single-copy reads of peers' buffers) where the kernel allows.
  bool single_copy = true;
};

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
  uint8_t* in(int local_rank, int slot) const;
  uint8_t* out(int local_rank, int slot) const;

  // Barrier among the host's ranks (see the file comment). Throws heft::PeerLost when a peer
  // aborted or `liveness` reports it gone, heft::Timeout at the deadline; both name the peer
  // by its communicator rank and `op`.
  void sync(Deadline deadline, const std::string& op);

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
  // Publishes the address of this rank's buffer for the current operation (read by peers
  // after the next sync()).
  void publish_buffer(const void* address);
  // Copies `bytes` from local rank `peer`'s published buffer at `offset` into `dst`. Throws
  // heft::PeerLost when the peer is gone, heft::IoError on other failures.
  void read_peer(int peer, size_t offset, void* dst, size_t bytes, const std::string& op);
  // A scratch area of at least `bytes` owned by this context (reused across calls).
  uint8_t* scratch(size_t bytes);

 private:
  Context(int rank, std::vector<int> global_ranks, const ContextOptions& options);
  struct Header;
  Header& header(int local_rank) const;
  void wait_for(int peer, uint32_t epoch, Deadline deadline, const std::string& op);
  void probe_cma(Store& store, const std::string& group, Millis timeout);

  int rank_;
  std::vector<int> global_ranks_;
  ContextOptions options_;
  std::vector<Segment> segments_;  // by local rank; segments_[rank_] is ours
  uint32_t epoch_ = 0;
  uint32_t slot_ = 0;
  std::function<void(int, const std::string&)> liveness_;
  bool cma_ = false;
  std::vector<uint8_t> scratch_;
};

}  // namespace heft::comm::shm
