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
// Deliberately left out: tags on collectives, cancellation, non-contiguous buffers.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "heft/comm/dtype.h"
#include "heft/comm/options.h"
#include "heft/comm/topology.h"
#include "heft/comm/trace.h"
#include "heft/comm/store/store.h"
#include "heft/comm/transport/shm/context.h"
#include "heft/comm/transport/transport.h"
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

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& group() const { return group_; }
  const CommunicatorOptions& options() const { return options_; }
  const Topology& topology() const { return topology_; }
  // Whether this rank shares memory with others of its host.
  bool has_shared_memory() const { return shm_ != nullptr; }
  // The algorithm an allreduce / broadcast of `bytes` runs with under these options.
  Algorithm allreduce_algorithm(size_t bytes) const;
  Algorithm broadcast_algorithm(size_t bytes) const;

  // recv[i] = op over ranks of send[i], i < count, on every rank. send == recv: in place.
  // compression kBf16 (f32 only; lossy, ~3 significant digits): the data crosses the wire
  // and is reduced as bf16, halving the bytes moved; kDefault: options().compression.
  std::shared_ptr<Work> allreduce_async(const void* send, void* recv, size_t count, DataType t,
                                        ReduceOp op, Compression compression = Compression::kDefault);
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

  // What the last allreduce that finished on this rank really ran: "shm/small",
  // "shm/slots", "shm/single_copy", "hierarchical(shm/slots)", "hierarchical(leaders)",
  // "recursive_doubling" or "ring" (empty before the first). Read it after the call's wait().
  std::string last_allreduce_path() const;
  // How this rank's shared-memory allreduces went so far (all zero without shared memory).
  shm::PathCounts shm_path_counts() const;
  // Across hosts (CommunicatorOptions::measure_allreduce): how many allreduce sizes this
  // communicator measured the hierarchical form against the flat ring for, how many sizes'
  // forms it took from rank 0's record of earlier runs (choice_cache.h) instead, and the form
  // chosen for allreduces of `bytes` either way (kAuto: not decided yet).
  int allreduce_measurements() const { return measurements_.load(std::memory_order_acquire); }
  int recorded_allreduce_choices() const {
    return cached_choices_.load(std::memory_order_acquire);
  }
  Algorithm measured_allreduce(size_t bytes) const;
  // Operations that ran on their caller's thread (blocking calls on an idle communicator).
  uint64_t inline_operations() const { return inline_ops_.load(std::memory_order_relaxed); }

 private:
  Communicator(std::shared_ptr<Store> store, std::string group, int rank, int size,
               CommunicatorOptions options, std::unique_ptr<Transport> transport,
               Topology topology, std::unique_ptr<shm::Context> shm);
  // True when the whole group is one host with shared memory.
  bool single_shm_host() const { return shm_ && topology_.hosts() == 1; }
  // Queues fn to run on the communicator thread as operation `op`; inside blocking(), runs
  // it on the calling thread instead when nothing is queued or running.
  std::shared_ptr<Work> enqueue(std::string op, std::function<void(Deadline)> fn);
  // Calls submit (an `_async` call) asking enqueue to run inline, then waits for its Work.
  void blocking(const std::function<std::shared_ptr<Work>()>& submit);
  void loop();
  void run_one(const std::string& op, const std::function<void(Deadline)>& fn, Work& work,
               uint64_t seq);
  // Runs the allreduce algorithm chosen for this size in place on recv (comm thread).
  void run_allreduce(void* recv, size_t count, DataType t, ReduceOp op, Deadline deadline,
                     const std::string& name);
  // The form of an allreduce of count elements across hosts under kAuto, the same on every
  // rank and in every run that reads the same record: at the first such call, rank 0's
  // record of earlier runs (load_choices); for a size it lacks, measure_allreduce. Comm
  // thread; collective: every rank calls it at the same call.
  Algorithm choose_allreduce(size_t count, DataType t, ReduceOp op, Deadline deadline,
                             const std::string& name);
  void load_choices(Deadline deadline, const std::string& name);
  // Times the hierarchical and flat-ring allreduce of count elements on a scratch buffer,
  // agrees on the faster (slowest rank's times), has rank 0 record it, and returns the
  // recorded decision (another run's, when it recorded one meanwhile).
  Algorithm measure_allreduce(size_t count, DataType t, ReduceOp op, Deadline deadline,
                              const std::string& name);
  // Rank 0's value on every rank (others pass anything >= -1 smaller; one tiny allreduce).
  int agree_on_rank0(int value, Deadline deadline, const std::string& name);
  // What the record's decisions depend on: world, ranks per host, machine, options.
  std::string choice_fingerprint() const;
  std::exception_ptr on_failure(const std::string& op, std::exception_ptr error);
  void check_peer(int peer, const char* what) const;

  std::shared_ptr<Store> store_;
  const std::string group_;
  const int rank_;
  const int size_;
  const CommunicatorOptions options_;
  std::unique_ptr<Transport> transport_;
  const Topology topology_;
  std::unique_ptr<shm::Context> shm_;  // null when alone on the host or shm is off
  int split_count_ = 0;  // only touched by split(), which is collective and ordered
  // Paths already logged, by power-of-two size bucket (communicator thread only).
  std::string logged_paths_[64];
  // The measured allreduce choice by power-of-two size bucket (an Algorithm, -1 not yet):
  // written by the comm thread, read by callers naming an operation.
  std::array<std::atomic<int>, 64> measured_;
  std::atomic<int> measurements_{0};
  std::atomic<int> cached_choices_{0};
  bool choices_loaded_ = false;  // rank 0's record read (comm thread)
  std::string choice_cache_;     // the record's path on rank 0 ("" elsewhere or off)

  struct Op {
    std::string name;
    std::function<void(Deadline)> fn;
    std::shared_ptr<Work> work;
    uint64_t seq = 0;  // in the collective trace; 0 without one
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;            // guarded by mu_
  bool stopping_ = false;           // guarded by mu_
  bool busy_ = false;               // an operation runs (either thread); guarded by mu_
  std::atomic<uint64_t> inline_ops_{0};
  std::exception_ptr broken_;       // guarded by mu_
  std::string last_path_;           // guarded by mu_
  // This rank's flight recorder (trace.h), when HEFT_TRACE_DIR is set; written under mu_ or
  // by the thread running the operation.
  std::unique_ptr<CollectiveTrace> trace_;
  std::thread thread_;
};

}  // namespace heft::comm
