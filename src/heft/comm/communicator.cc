// The communicator's set-up and its calls (communicator.h): create() builds the links, each
// collective names its operation and queues a closure over Communicator::Impl
// (communicator_impl.h) that runs the algorithm chosen. The queue itself is
// communicator_queue.cc; the allreduce's choice of form, allreduce_choice.cc.
#include "heft/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "heft/check.h"
#include "heft/comm/algo/chain_broadcast.h"
#include "heft/comm/algo/dissemination_barrier.h"
#include "heft/comm/algo/pairwise_alltoall.h"
#include "heft/comm/algo/recursive_doubling_allreduce.h"
#include "heft/comm/algo/ring_allgather.h"
#include "heft/comm/algo/ring_allreduce.h"
#include "heft/comm/algo/ring_reduce_scatter.h"
#include "heft/comm/algo/tree_broadcast.h"
#include "heft/comm/algo/tree_reduce.h"
#include "heft/comm/algo/hierarchical_allreduce.h"
#include "heft/comm/algo/shm_allreduce.h"
#include "heft/comm/algo/shm_collectives.h"
#include "heft/comm/choice_cache.h"  // size_bucket
#include "heft/comm/communicator_impl.h"
#include "heft/comm/transport/shm/context.h"
#include "heft/comm/transport/tcp/context.h"

namespace heft::comm {

namespace {

std::string describe(const char* verb, Algorithm a, size_t bytes) {
  return std::string(verb) + "(" + name(a) + ", " + std::to_string(bytes) + " B)";
}

// Header of a point-to-point message, checked by the receiver.
struct P2PHeader {
  uint32_t magic = 0x50325048;  // "HP2P"
  uint32_t tag = 0;
  uint64_t bytes = 0;
};

// Every rank publishes its host name; all read all of them.
Topology exchange_hosts(Store& store, const std::string& group, int rank, int size,
                        std::string host, Deadline deadline) {
  if (host.empty()) {
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    host = buf;
  }
  store.set(group + "/host/" + std::to_string(rank), host);
  std::vector<std::string> names(size);
  for (int r = 0; r < size; ++r)
    names[r] = store.get_string(group + "/host/" + std::to_string(r), time_left(deadline));
  return Topology::from_names(names, rank);
}

// The contexts of the ranks that share a core (communicator_impl.h ShmCores), from the CPUs
// the host's ranks published in `host` (or consecutive groups of `group_size`): this rank's
// core's, then, on a core's first rank, the first ranks'. Every rank of the host computes
// the same groups, so each context is made by exactly its members.
ShmCores share_cores(Store& store, const std::string& host_group, const Topology& topology,
                     shm::Context& host, int group_size, shm::ContextOptions options,
                     Deadline deadline) {
  std::vector<int> cpus(topology.local_size());
  for (int r = 0; r < topology.local_size(); ++r) cpus[r] = host.single_cpu(r);
  const std::vector<std::vector<int>> groups = core_groups(cpus, group_size);
  ShmCores cores;
  if (groups.empty()) return cores;
  // The flat direct form adds group by group too: the two forms give the same bits, so the
  // choice between them may follow the placement.
  host.set_fold_groups(groups);
  size_t mine = 0, index = 0;
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].size(); ++i)
      if (groups[g][i] == topology.local_rank) mine = g, index = i;
  options.single_copy = false;  // the steps are reduce, broadcast and the direct form
  options.probe_every = 0;      // the first ranks probe when cores_far() says
  if (groups[mine].size() > 1) {
    for (int r : groups[mine]) cores.core_ranks.push_back(topology.local()[r]);
    shm::ContextOptions core_options = options;
    core_options.placement = shm::Placement::kNear;  // one core: nothing to measure
    cores.core = shm::Context::create(store, host_group + "/core" + std::to_string(mine),
                                      static_cast<int>(index), cores.core_ranks, core_options,
                                      deadline);
  }
  if (index == 0) {
    for (const auto& g : groups) cores.leader_ranks.push_back(topology.local()[g[0]]);
    cores.leaders = shm::Context::create(store, host_group + "/leaders", static_cast<int>(mine),
                                         cores.leader_ranks, options, deadline);
  }
  // Every rank of the host leaves set-up together, through the store (a blocking wait):
  // else a core's other rank waits for its first rank's second context in shared memory,
  // its yields hand the core over for the set-up's milliseconds, and one yield that slow
  // makes the next 50 ms of waits sleep (shm/context.h): a benchmark of 32-64 KiB on 4
  // ranks ran 2.5x slower in one start of two.
  store.set(host_group + "/cores-ready/" + std::to_string(topology.local_rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < topology.local_size(); ++r)
    keys.push_back(host_group + "/cores-ready/" + std::to_string(r));
  store.wait(keys, time_left(deadline));
  return cores;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store,
                                                   const std::string& group, int rank, int size,
                                                   CommunicatorOptions options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw InvalidArgument("communicator: rank " + std::to_string(rank) +
                          " is not in a group of size " + std::to_string(size));
  if (options.token.empty())
    throw InvalidArgument("communicator: the job token is empty (set HEFT_TOKEN)");
  const Deadline deadline = std::chrono::steady_clock::now() + options.timeout;
  tcp::ContextOptions tcp_options;
  tcp_options.bind_address = options.bind_address;
  std::unique_ptr<Transport> transport =
      tcp::Context::create(*store, group, rank, size, options.token, tcp_options, deadline);
  Topology topology = exchange_hosts(*store, group, rank, size, options.host, deadline);
  std::unique_ptr<shm::Context> shm;
  ShmCores cores;
  if (options.shared_memory && topology.local_size() > 1) {
    shm::ContextOptions shm_options;
    shm_options.token = options.token;
    shm_options.chunk_bytes = options.shm_chunk_bytes;
    shm_options.spin_us = options.shm_spin_us;
    shm_options.contended_spin_us = options.shm_contended_spin_us;
    shm_options.stream_slots = options.shm_stream_slots;
    static_assert(static_cast<int>(shm::Placement::kFar) ==
                  static_cast<int>(CommunicatorOptions::ShmPlacement::kFar));
    shm_options.placement = static_cast<shm::Placement>(options.shm_placement);
    shm_options.far_sync_ns = options.shm_far_sync_ns;
    shm_options.probe_bytes = options.shm_probe_bytes;
    // Cross-memory attach is probed only where that form may run.
    shm_options.single_copy =
        options.effective_shm_form() == CommunicatorOptions::ShmForm::kSingleCopy;
    const std::string host_group = group + "/host" + std::to_string(topology.host);
    shm = shm::Context::create(*store, host_group, topology.local_rank, topology.local(),
                               shm_options, deadline);
    if (topology.hosts() == 1 && options.shm_core_group != 0)
      cores = share_cores(*store, host_group, topology, *shm, options.shm_core_group,
                          shm_options, deadline);
  }
  return std::unique_ptr<Communicator>(new Communicator(std::make_unique<Impl>(
      std::move(store), group, rank, size, std::move(options), std::move(transport),
      std::move(topology), std::move(shm), std::move(cores))));
}

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::~Communicator() = default;  // ~Impl finishes the queue, then closes the links

int Communicator::rank() const { return impl_->rank_; }
int Communicator::size() const { return impl_->size_; }
const std::string& Communicator::group() const { return impl_->group_; }
const CommunicatorOptions& Communicator::options() const { return impl_->options_; }
const Topology& Communicator::topology() const { return impl_->topology_; }
bool Communicator::has_shared_memory() const { return impl_->shm_ != nullptr; }

Algorithm Communicator::allreduce_algorithm(size_t bytes) const {
  return impl_->allreduce_algorithm(bytes);
}

Algorithm Communicator::broadcast_algorithm(size_t bytes) const {
  return impl_->broadcast_algorithm(bytes);
}

bool Communicator::healthy() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return !impl_->broken_;
}

std::string Communicator::last_allreduce_path() const { return last_allreduce_plan().path(); }

AllreducePlan Communicator::last_allreduce_plan() const {
  std::lock_guard<std::mutex> lock(impl_->mu_);
  return impl_->last_plan_;
}

shm::PathCounts Communicator::shm_path_counts() const {
  // The counters are written on the communicator thread; a caller reads them after its
  // Work finished, which orders the two.
  return impl_->shm_ ? impl_->shm_->path_counts() : shm::PathCounts{};
}

int Communicator::allreduce_measurements() const {
  return impl_->measurements_.load(std::memory_order_acquire);
}

int Communicator::recorded_allreduce_choices() const {
  return impl_->cached_choices_.load(std::memory_order_acquire);
}

Algorithm Communicator::measured_allreduce(size_t bytes) const {
  return impl_->measured_allreduce(bytes);
}

uint64_t Communicator::inline_operations() const {
  return impl_->inline_ops_.load(std::memory_order_relaxed);
}

Algorithm Communicator::Impl::broadcast_algorithm(size_t bytes) const {
  Algorithm a = options_.broadcast_algorithm;
  if (a == Algorithm::kRing) a = Algorithm::kChain;  // a pipelined chain is the ring's broadcast
  if (a == Algorithm::kRecursiveDoubling) a = Algorithm::kTree;
  if (a == Algorithm::kHierarchical) a = Algorithm::kAuto;
  if (a == Algorithm::kShm && !single_shm_host()) a = Algorithm::kAuto;
  if (a != Algorithm::kAuto) return a;
  if (single_shm_host()) return Algorithm::kShm;
  return bytes <= options_.small_message_bytes ? Algorithm::kTree : Algorithm::kChain;
}

void Communicator::Impl::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is not in this group of " + std::to_string(size_));
}

// Each call below names its operation and queues a closure over `m`, the Impl (the one
// pointer hop from the public object): the closure runs on whichever thread runs the queue.
std::shared_ptr<Work> Communicator::allreduce_async(const void* send, void* recv, size_t count,
                                                    DataType t, ReduceOp op,
                                                    Compression compression) {
  require_op_applies(op, t, "allreduce");  // before anything is sent: every rank refuses alike
  Impl* m = impl_.get();
  if (compression == Compression::kDefault) compression = m->options_.compression;
  if (compression == Compression::kBf16 && t == DataType::f32) {
    // Lossy: the f32 data travels and is reduced as bf16 (half the bytes), then widens back.
    std::string name =
        describe("allreduce", m->allreduce_algorithm(count * 2), count * 2) + "[bf16 wire]";
    return m->enqueue(name, [=](Deadline deadline) {
      std::vector<uint16_t> wire(count);
      const float* in = static_cast<const float*>(send);
      for (size_t i = 0; i < count; ++i) wire[i] = float_to_bf16(in[i]);
      m->run_allreduce(wire.data(), count, DataType::bf16, op, deadline, name);
      float* out = static_cast<float*>(recv);
      for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(wire[i]);
    });
  }
  const size_t bytes = count * element_size(t);
  std::string name = describe("allreduce", m->allreduce_algorithm(bytes), bytes);
  return m->enqueue(name, [=](Deadline deadline) {
    if (send != recv) std::memcpy(recv, send, bytes);
    m->run_allreduce(recv, count, t, op, deadline, name);
  });
}

bool Communicator::Impl::cores_far(size_t bytes, Deadline deadline, const std::string& name) {
  // A probe and its hand-over on each core cost tens of µs where ranks share cores: once
  // per 32 MiB reduced, under 1% of the calls' time (the host moves a VM's vCPUs within
  // seconds, these are milliseconds).
  constexpr uint64_t kCoresProbeBytes = uint64_t{32} << 20;
  const bool probe = cores_.bytes_since_probe >= kCoresProbeBytes;
  cores_.bytes_since_probe = probe ? bytes : cores_.bytes_since_probe + bytes;
  if (!probe) return cores_.far;
  uint8_t far = 0;
  if (cores_.leaders) far = cores_.leaders->probe_placement(deadline, name) ? 1 : 0;
  if (cores_.core) {
    algo::ShmLinks local{*cores_.core, deadline, name};
    algo::shm_broadcast(local, &far, 1, 0);
  }
  cores_.far = far != 0;
  return cores_.far;
}

AllreducePlan Communicator::Impl::plan_allreduce(size_t count, DataType t, ReduceOp op,
                                                 algo::ShmLinks* local, Deadline deadline,
                                                 const std::string& name) {
  AllreducePlan plan;
  plan.bytes = count * element_size(t);
  plan.algorithm = allreduce_algorithm(plan.bytes);
  // Not decided yet for this size: rank 0's record decides, else a measurement now, before
  // this call runs, so every call of the size takes one form in this run and the next.
  if (plan.algorithm == Algorithm::kAuto)
    plan.algorithm = choose_allreduce(count, t, op, deadline, name);
  switch (plan.algorithm) {
    case Algorithm::kShm:
      if (cores_.active() && takes_cores(count, t, op, deadline, name)) {
        plan.shm = ShmStep::kCores;
        break;
      }
      if (options_.measure_shm_small && options_.effective_shm_form() == CommunicatorOptions::ShmForm::kAuto &&
          measured_small_size(plan.bytes))
        plan.shm = choose_shm_step(count, t, op, deadline, name);  // this machine's record, else measured now
      else
        plan.shm = flat_shm_step(plan.bytes, options_.shm_small_bytes, options_.effective_shm_form(),
                                 shm_->cma_available());
      // The placement decides the direct form's stores (a probe every few calls: the
      // operation's first sync when it runs, carrying the call's check).
      if (plan.shm == ShmStep::kDirect) plan.far = local->far(plan.bytes);
      break;
    case Algorithm::kHierarchical:
      // Every host of a uniform topology reduces its slice across hosts from inside the
      // direct form (the same slices on each); cached stores: its ranks share cores.
      plan.shm = topology_.uniform() && shm_ ? ShmStep::kDirect : ShmStep::kNone;
      break;
    default:
      break;
  }
  return plan;
}

void Communicator::Impl::run_allreduce(void* recv, size_t count, DataType t, ReduceOp op,
                                       Deadline deadline, const std::string& name) {
  const auto call = algo::call_signature(algo::Call::allreduce, count, t, op);
  std::optional<algo::ShmLinks> local;
  if (shm_) local.emplace(algo::ShmLinks{*shm_, deadline, name, call});
  const AllreducePlan plan = plan_allreduce(count, t, op, local ? &*local : nullptr, deadline, name);
  switch (plan.algorithm) {
    case Algorithm::kShm:
      if (plan.shm == ShmStep::kCores) {
        algo::core_grouped_allreduce(cores_.core.get(), cores_.leaders.get(), recv, count, t, op,
                                     options_.shm_small_bytes, size_, deadline, name);
        ++shm_->path_counts().cores;
      } else {
        algo::shm_allreduce(*local, recv, count, t, op, plan.shm, plan.far, size_);
      }
      break;
    case Algorithm::kHierarchical:
      algo::hierarchical_allreduce(*transport_, shm_.get(), topology_, recv, count, t, op,
                                   options_.small_message_bytes, deadline, name);
      break;
    case Algorithm::kRecursiveDoubling: {
      algo::Links links{*transport_, deadline, name, call};
      algo::recursive_doubling_allreduce(links, recv, count, t, op);
      break;
    }
    default: {
      algo::Links links{*transport_, deadline, name, call};
      algo::ring_allreduce(links, recv, count, t, op);
    }
  }
  std::string& logged = logged_paths_[size_bucket(plan.bytes)];
  std::string path = plan.path();
  if (logged != path) {
    spdlog::debug("rank {}: {} took {}", rank_, name, path);
    logged = std::move(path);
  }
  std::lock_guard<std::mutex> lock(mu_);
  last_plan_ = plan;
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv,
                                                         size_t recv_count, DataType t,
                                                         ReduceOp op) {
  require_op_applies(op, t, "reduce_scatter");
  Impl* m = impl_.get();
  const bool shm = m->single_shm_host();
  std::string name = describe("reduce_scatter", shm ? Algorithm::kShm : Algorithm::kRing,
                              recv_count * element_size(t) * m->size_);
  return m->enqueue(name, [=](Deadline deadline) {
    const auto call = algo::call_signature(algo::Call::reduce_scatter, recv_count, t, op);
    if (shm) {
      algo::ShmLinks local{*m->shm_, deadline, name, call};
      return algo::shm_reduce_scatter(local, send, recv, recv_count, t, op, m->size_);
    }
    algo::Links links{*m->transport_, deadline, name, call};
    algo::ring_reduce_scatter(links, send, recv, recv_count, t, op);
  });
}

std::shared_ptr<Work> Communicator::allgather_async(const void* send, void* recv,
                                                    size_t send_count, DataType t) {
  Impl* m = impl_.get();
  const bool shm = m->single_shm_host();
  std::string name = describe("allgather", shm ? Algorithm::kShm : Algorithm::kRing,
                              send_count * element_size(t) * m->size_);
  return m->enqueue(name, [=](Deadline deadline) {
    const auto call = algo::call_signature(algo::Call::allgather, send_count, t);
    if (shm) {
      algo::ShmLinks local{*m->shm_, deadline, name, call};
      return algo::shm_allgather(local, send, recv, send_count, t);
    }
    algo::Links links{*m->transport_, deadline, name, call};
    algo::ring_allgather(links, send, recv, send_count, t);
  });
}

std::shared_ptr<Work> Communicator::broadcast_async(void* buf, size_t count, DataType t,
                                                    int root) {
  Impl* m = impl_.get();
  m->check_peer(root, "broadcast root");
  const size_t bytes = count * element_size(t);
  const Algorithm algo = m->broadcast_algorithm(bytes);
  std::string name = describe("broadcast", algo, bytes);
  return m->enqueue(name, [=](Deadline deadline) {
    const auto call =
        algo::call_signature(algo::Call::broadcast, bytes, DataType::f32, ReduceOp::sum, root);
    if (algo == Algorithm::kShm) {
      algo::ShmLinks local{*m->shm_, deadline, name, call};
      return algo::shm_broadcast(local, buf, bytes, root);
    }
    algo::Links links{*m->transport_, deadline, name, call};
    if (algo == Algorithm::kChain)
      algo::chain_broadcast(links, buf, bytes, root);
    else
      algo::tree_broadcast(links, buf, bytes, root);
  });
}

std::shared_ptr<Work> Communicator::reduce_async(const void* send, void* recv, size_t count,
                                                 DataType t, ReduceOp op, int root) {
  require_op_applies(op, t, "reduce");
  Impl* m = impl_.get();
  m->check_peer(root, "reduce root");
  const bool shm = m->single_shm_host();
  std::string name =
      describe("reduce", shm ? Algorithm::kShm : Algorithm::kTree, count * element_size(t));
  return m->enqueue(name, [=](Deadline deadline) {
    const auto call = algo::call_signature(algo::Call::reduce, count, t, op, root);
    if (shm) {
      algo::ShmLinks local{*m->shm_, deadline, name, call};
      return algo::shm_reduce(local, send, recv, count, t, op, root, m->size_);
    }
    algo::Links links{*m->transport_, deadline, name, call};
    algo::tree_reduce(links, send, recv, count, t, op, root);
  });
}

std::shared_ptr<Work> Communicator::alltoall_async(const void* send, void* recv, size_t count,
                                                   DataType t) {
  Impl* m = impl_.get();
  if (send == recv && count > 0 && m->size_ > 1)
    throw InvalidArgument("alltoall: send and recv must be different buffers");
  std::string name =
      "alltoall(pairwise, " + std::to_string(count * element_size(t) * m->size_) + " B)";
  return m->enqueue(name, [=](Deadline deadline) {
    algo::Links links{*m->transport_, deadline, name,
                      algo::call_signature(algo::Call::alltoall, count, t)};
    algo::pairwise_alltoall(links, send, recv, count, t);
  });
}

std::shared_ptr<Work> Communicator::barrier_async() {
  Impl* m = impl_.get();
  return m->enqueue("barrier", [m](Deadline deadline) {
    const auto call = algo::call_signature(algo::Call::barrier, 0);
    if (m->single_shm_host()) {
      algo::ShmLinks local{*m->shm_, deadline, "barrier(shm)", call};
      return algo::shm_barrier(local);
    }
    algo::Links links{*m->transport_, deadline, "barrier", call};
    algo::dissemination_barrier(links);
  });
}

std::shared_ptr<Work> Communicator::send_async(const void* buf, size_t count, DataType t,
                                               int peer, uint32_t tag) {
  return exchange_async({P2POp::send(buf, count, t, peer, tag)});
}

std::shared_ptr<Work> Communicator::recv_async(void* buf, size_t count, DataType t, int peer,
                                               uint32_t tag) {
  return exchange_async({P2POp::recv(buf, count, t, peer, tag)});
}

std::shared_ptr<Work> Communicator::exchange_async(std::vector<P2POp> ops) {
  Impl* m = impl_.get();
  const int rank = m->rank_;
  std::string name;
  for (const P2POp& o : ops) {
    const bool send = o.kind == P2POp::Kind::kSend;
    m->check_peer(o.peer, send ? "send" : "recv");
    if (o.peer == rank)
      throw InvalidArgument(std::string(send ? "send" : "recv") + ": a rank cannot " +
                            (send ? "send to" : "receive from") + " itself");
    name += std::string(name.empty() ? "" : ", ") + (send ? "send(to rank " : "recv(from rank ") +
            std::to_string(o.peer) + ", tag " + std::to_string(o.tag) + ", " +
            std::to_string(o.count * element_size(o.type)) + " B)";
  }
  if (ops.size() > 1) name = "exchange[" + name + "]";
  return m->enqueue(name, [m, rank, ops = std::move(ops), name](Deadline deadline) {
    // Each op: a header, then its payload. A receiver checks each header as soon as it has
    // arrived, before the payload, so a mismatch fails at once instead of at the deadline.
    std::vector<P2PHeader> headers(ops.size());
    std::vector<Transfer> transfers;
    transfers.reserve(2 * ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const P2POp& o = ops[i];
      const size_t bytes = o.count * element_size(o.type);
      if (o.kind == P2POp::Kind::kSend) {
        headers[i].tag = o.tag;
        headers[i].bytes = bytes;
        transfers.push_back(Transfer::send(o.peer, &headers[i], sizeof(P2PHeader)));
        transfers.push_back(Transfer::send(o.peer, o.buf, bytes));
        continue;
      }
      headers[i].magic = 0;
      Transfer header = Transfer::recv(o.peer, &headers[i], sizeof(P2PHeader));
      header.on_progress = [rank, &h = headers[i], o, bytes](size_t got) {
        if (got < sizeof(P2PHeader)) return;
        if (h.magic != P2PHeader{}.magic || h.tag != o.tag || h.bytes != bytes)
          throw InvalidArgument("rank " + std::to_string(rank) + ": recv(from rank " +
                                std::to_string(o.peer) + ", tag " + std::to_string(o.tag) +
                                ", " + std::to_string(bytes) +
                                " B) does not match the message rank " +
                                std::to_string(o.peer) + " sent (tag " + std::to_string(h.tag) +
                                ", " + std::to_string(h.bytes) + " B)");
      };
      transfers.push_back(std::move(header));
      transfers.push_back(Transfer::recv(o.peer, o.buf, bytes));
    }
    m->transport_->exchange(transfers.data(), transfers.size(), deadline, name);
  });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  Impl& m = *impl_;
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(m.size_));
  allgather(mine, all.data(), 2, DataType::i32);
  const int seq = m.split_count_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank here)
  for (int r = 0; r < m.size_; ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[new_rank].second != m.rank_) ++new_rank;
  const std::string group =
      m.group_ + "/split" + std::to_string(seq) + "/" + std::to_string(color);
  return create(m.store_, group, new_rank, static_cast<int>(members.size()), m.options_);
}

}  // namespace heft::comm
