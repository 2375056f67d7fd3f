// Communicator: a group of ranks and the collectives over them, on raw buffers.
//
// Transports: a full mesh of TCP links among all ranks (tcp/context.h), plus shared memory
// among the ranks of each host (shm/context.h) unless options.shared_memory is false. Which
// ranks share a host comes from options.host (topology.h). One host: collectives go through
// shared memory; several: allreduce is hierarchical, the others run over TCP.
//
// Every collective is issued in the same order on every rank of the group (as in MPI and
// NCCL) and runs one at a time, in issue order: the `_async` forms queue it for the
// communicator's own thread and return a Work at once; the plain forms run it on the
// calling thread when nothing is queued or running (saving two thread hand-offs, several µs
// per call), else queue it and wait. Buffers handed to an
// async call must stay valid and untouched until its Work finished.
//
// Errors (docs/errors.md): each operation has a deadline (options.timeout from when it
// starts). A peer that dies or closes makes the operation fail with heft::PeerLost on every
// rank, naming the lost peer: the first rank to see the loss records it in the store and
// breaks all its links, so the loss spreads to every rank at once instead of each waiting
// for its deadline. After any failure the communicator is broken: every later call fails
// with the same error. Not copyable; methods are thread-safe (calls from several threads are
// ordered by who gets the queue first, which is rarely what you want).
//
// This header is the contract; the transports, the queue and the measurements live behind it
// in Communicator::Impl (communicator_impl.h, internal to comm/).
//
// Deliberately left out: tags on collectives, cancellation, non-contiguous buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "heft/comm/allreduce_plan.h"
#include "heft/comm/dtype.h"
#include "heft/comm/options.h"
#include "heft/comm/store/store.h"
#include "heft/comm/topology.h"
// Not needed here: kept for users that reach CollectiveTrace (HEFT_TRACE_DIR) through this
// header (parallel/mesh.cc).
#include "heft/comm/trace.h"
#include "heft/comm/transport/shm/path_counts.h"
#include "heft/comm/work.h"

namespace heft::comm {

// One send or receive of a batched point-to-point exchange (Communicator::exchange).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  void* buf = nullptr;  // send: read from (not modified); recv: written to
  size_t count = 0;
  DataType type = DataType::f32;
  int peer = -1;
  uint32_t tag = 0;

  static P2POp send(const void* buf, size_t count, DataType t, int peer, uint32_t tag = 0) {
    return {Kind::kSend, const_cast<void*>(buf), count, t, peer, tag};
  }
  static P2POp recv(void* buf, size_t count, DataType t, int peer, uint32_t tag = 0) {
    return {Kind::kRecv, buf, count, t, peer, tag};
  }
};

class Communicator {
 public:
  // Joins the group `group` as `rank` of `size`: rendezvous through `store` (keys under
  // "<group>/"), a full mesh of authenticated TCP links, shared-memory segments per host.
  // Blocks until all ranks joined or options.timeout passed (heft::Timeout naming the
  // missing ranks).
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store,
                                              const std::string& group, int rank, int size,
                                              CommunicatorOptions options);
  // Finishes queued operations, then closes the links.
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& group() const;
  const CommunicatorOptions& options() const;
  const Topology& topology() const;
  // Whether this rank shares memory with others of its host.
  bool has_shared_memory() const;
  // The algorithm an allreduce / broadcast of `bytes` runs with under these options.
  Algorithm allreduce_algorithm(size_t bytes) const;
  Algorithm broadcast_algorithm(size_t bytes) const;

  // recv[i] = op over ranks of send[i], i < count, on every rank. send == recv: in place.
  // compression kBf16 (f32 only; lossy, ~3 significant digits): the data crosses the wire
  // and is reduced as bf16, halving the bytes moved; kDefault: options().compression.
  std::shared_ptr<Work> allreduce_async(const void* send, void* recv, size_t count, DataType t,
                                        ReduceOp op,
                                        Compression compression = Compression::kDefault);
  // send: size()*recv_count elements, block j for rank j; recv: this rank's block reduced.
  // recv == send + rank()*recv_count: in place.
  std::shared_ptr<Work> reduce_scatter_async(const void* send, void* recv, size_t recv_count,
                                             DataType t, ReduceOp op);
  // recv: size()*send_count elements, rank j's send in block j. send ==
  // recv + rank()*send_count: in place.
  std::shared_ptr<Work> allgather_async(const void* send, void* recv, size_t send_count,
                                        DataType t);
  // buf on root is copied to buf on every rank.
  std::shared_ptr<Work> broadcast_async(void* buf, size_t count, DataType t, int root);
  // recv on root = op over ranks of send; recv untouched elsewhere (may be null there).
  std::shared_ptr<Work> reduce_async(const void* send, void* recv, size_t count, DataType t,
                                     ReduceOp op, int root);
  // send, recv: size()*count elements; send block j goes to rank j's recv block rank().
  std::shared_ptr<Work> alltoall_async(const void* send, void* recv, size_t count, DataType t);
  // Completes on a rank only after every rank entered it.
  std::shared_ptr<Work> barrier_async();
  // Point to point. A recv must match the peer's send in tag and count, else both break
  // with an error naming the mismatch.
  std::shared_ptr<Work> send_async(const void* buf, size_t count, DataType t, int peer,
                                   uint32_t tag = 0);
  std::shared_ptr<Work> recv_async(void* buf, size_t count, DataType t, int peer,
                                   uint32_t tag = 0);
  // Point to point, batched: every send and receive of `ops` progresses at once, as one
  // operation, so two ranks that both send first never deadlock however large the messages
  // (separate send()/recv() calls run one after the other and would, once a message
  // outgrows the socket buffers). Messages to one peer arrive in the order given; each
  // receive must match its sender's op in tag and count (else both break, naming the
  // mismatch). Not a collective: only the ranks named take part, each with ops mirroring
  // its peers'. Through TCP, also between ranks of one host.
  std::shared_ptr<Work> exchange_async(std::vector<P2POp> ops);

  void allreduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op,
                 Compression compression = Compression::kDefault) {
    blocking([&] { return allreduce_async(send, recv, count, t, op, compression); });
  }
  void allreduce(void* buf, size_t count, DataType t, ReduceOp op) {
    allreduce(buf, buf, count, t, op);
  }
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DataType t, ReduceOp op) {
    blocking([&] { return reduce_scatter_async(send, recv, recv_count, t, op); });
  }
  void allgather(const void* send, void* recv, size_t send_count, DataType t) {
    blocking([&] { return allgather_async(send, recv, send_count, t); });
  }
  void broadcast(void* buf, size_t count, DataType t, int root) {
    blocking([&] { return broadcast_async(buf, count, t, root); });
  }
  void reduce(const void* send, void* recv, size_t count, DataType t, ReduceOp op, int root) {
    blocking([&] { return reduce_async(send, recv, count, t, op, root); });
  }
  void alltoall(const void* send, void* recv, size_t count, DataType t) {
    blocking([&] { return alltoall_async(send, recv, count, t); });
  }
  void barrier() { blocking([&] { return barrier_async(); }); }
  void send(const void* buf, size_t count, DataType t, int peer, uint32_t tag = 0) {
    blocking([&] { return send_async(buf, count, t, peer, tag); });
  }
  void recv(void* buf, size_t count, DataType t, int peer, uint32_t tag = 0) {
    blocking([&] { return recv_async(buf, count, t, peer, tag); });
  }
  void exchange(std::vector<P2POp> ops) {
    blocking([&] { return exchange_async(std::move(ops)); });
  }

  // MPI_Comm_split: ranks passing the same color form a new communicator, ordered by
  // (key, rank here). Collective over this communicator. color < 0: this rank joins none
  // and gets nullptr.
  std::unique_ptr<Communicator> split(int color, int key);

  // False once an operation failed (the communicator is then unusable).
  bool healthy() const;

  // The plan the last allreduce that finished on this rank ran (allreduce_plan.h: algorithm,
  // shared-memory step, placement; a default plan before the first), and its path:
  // "shm/small", "shm/direct", "shm/slots", "shm/single_copy", "shm/cores",
  // "hierarchical(shm/direct)", "hierarchical(leaders)", "recursive_doubling" or "ring"
  // (empty before the first). Read them after the call's wait().
  AllreducePlan last_allreduce_plan() const;
  std::string last_allreduce_path() const;
  // How this rank's shared-memory allreduces went so far (all zero without shared memory).
  shm::PathCounts shm_path_counts() const;
  // Across hosts (CommunicatorOptions::measure_allreduce): how many allreduce sizes this
  // communicator measured the hierarchical form against the flat ring for, how many sizes'
  // forms it took from rank 0's record of earlier runs (choice_cache.h) instead, and the form
  // chosen for allreduces of `bytes` either way (kAuto: not decided yet).
  int allreduce_measurements() const;
  int recorded_allreduce_choices() const;
  Algorithm measured_allreduce(size_t bytes) const;
  // Operations that ran on their caller's thread (blocking calls on an idle communicator).
  uint64_t inline_operations() const;

 private:
  // The transports, the operation queue and its thread, the measurements: everything behind
  // the calls above (communicator_impl.h; internal to comm/).
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  // Calls submit (an `_async` call) letting it run on this thread when nothing is queued or
  // running, then waits for its Work.
  void blocking(const std::function<std::shared_ptr<Work>()>& submit);

  std::unique_ptr<Impl> impl_;
};

}  // namespace heft::comm
