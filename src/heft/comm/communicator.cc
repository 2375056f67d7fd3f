#include "heft/comm/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
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
#include "heft/comm/choice_cache.h"  // size_bucket, choice_cache_path
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
  for (int r = 0; r < size; ++r) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    names[r] = store.get_string(group + "/host/" + std::to_string(r), std::max(left, Millis(1)));
  }
  return Topology::from_names(names, rank);
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
  if (options.shared_memory && topology.local_size() > 1) {
    shm::ContextOptions shm_options;
    shm_options.chunk_bytes = options.shm_chunk_bytes;
    shm_options.spin_us = options.shm_spin_us;
    shm_options.single_copy = options.shm_single_copy != CommunicatorOptions::SingleCopy::kOff;
    shm_options.measure_single_copy =
        options.shm_single_copy == CommunicatorOptions::SingleCopy::kAuto;
    shm = shm::Context::create(*store, group + "/host" + std::to_string(topology.host),
                               topology.local_rank, topology.local(), shm_options, deadline);
  }
  return std::unique_ptr<Communicator>(
      new Communicator(std::move(store), group, rank, size, std::move(options),
                       std::move(transport), std::move(topology), std::move(shm)));
}

Communicator::Communicator(std::shared_ptr<Store> store, std::string group, int rank, int size,
                           CommunicatorOptions options, std::unique_ptr<Transport> transport,
                           Topology topology, std::unique_ptr<shm::Context> shm)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      transport_(std::move(transport)),
      topology_(std::move(topology)),
      shm_(std::move(shm)) {
  for (auto& m : measured_) m.store(-1, std::memory_order_relaxed);
  if (rank_ == 0) choice_cache_ = choice_cache_path();
  if (shm_) {
    // A peer blocked in shared memory cannot see a socket close; look at its TCP link
    // while waiting for it.
    shm_->set_liveness_check([this](int local_peer, const std::string& op) {
      transport_->check_link(topology_.local()[local_peer], op);
    });
  }
  try {
    const char* world_rank = std::getenv("RANK");
    trace_ = CollectiveTrace::open(CollectiveTrace::dir_from_env(), group_, rank_, size_,
                                   world_rank && *world_rank ? std::atoi(world_rank) : rank_);
  } catch (const Error& e) {
    spdlog::warn("rank {}: no collective trace: {}", rank_, e.what());
  }
  thread_ = std::thread([this] { loop(); });
}

Communicator::~Communicator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool Communicator::healthy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !broken_;
}

Algorithm Communicator::allreduce_algorithm(size_t bytes) const {
  Algorithm a = options_.allreduce_algorithm;
  // The allreduce forms of the broadcast shapes, so the name reported is the one that runs.
  if (a == Algorithm::kTree) a = Algorithm::kRecursiveDoubling;
  if (a == Algorithm::kChain) a = Algorithm::kRing;
  const bool shared = options_.shared_memory && topology_.any_shared_host();
  if ((a == Algorithm::kShm && !single_shm_host()) || (a == Algorithm::kHierarchical && !shared))
    a = Algorithm::kAuto;  // not possible on this topology: fall back
  if (a != Algorithm::kAuto) return a;
  if (single_shm_host()) return Algorithm::kShm;
  if (shared && topology_.hosts() > 1) {
    if (bytes <= options_.small_message_bytes || !options_.measure_allreduce)
      return Algorithm::kHierarchical;
    return measured_allreduce(bytes);  // kAuto until measured: run_allreduce measures
  }
  return bytes <= options_.small_message_bytes ? Algorithm::kRecursiveDoubling
                                               : Algorithm::kRing;
}

Algorithm Communicator::broadcast_algorithm(size_t bytes) const {
  Algorithm a = options_.broadcast_algorithm;
  if (a == Algorithm::kRing) a = Algorithm::kChain;  // a pipelined chain is the ring's broadcast
  if (a == Algorithm::kRecursiveDoubling) a = Algorithm::kTree;
  if (a == Algorithm::kHierarchical) a = Algorithm::kAuto;
  if (a == Algorithm::kShm && !single_shm_host()) a = Algorithm::kAuto;
  if (a != Algorithm::kAuto) return a;
  if (single_shm_host()) return Algorithm::kShm;
  return bytes <= options_.small_message_bytes ? Algorithm::kTree : Algorithm::kChain;
}

namespace {
// Set by blocking() around its submit call on this thread: enqueue may then run inline.
thread_local bool t_blocking_call = false;
}  // namespace

std::shared_ptr<Work> Communicator::enqueue(std::string op, std::function<void(Deadline)> fn) {
  auto work = std::make_shared<Work>();
  uint64_t seq = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (trace_) seq = trace_->queued(op);
    if (!(t_blocking_call && queue_.empty() && !busy_)) {
      queue_.push_back(Op{std::move(op), std::move(fn), work, seq});
      lock.unlock();
      cv_.notify_all();
      return work;
    }
    busy_ = true;  // the communicator thread starts nothing until this is cleared
  }
  run_one(op, fn, *work, seq);
  inline_ops_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
  return work;
}

void Communicator::blocking(const std::function<std::shared_ptr<Work>()>& submit) {
  struct Flag {
    Flag() { t_blocking_call = true; }
    ~Flag() { t_blocking_call = false; }
  };
  std::shared_ptr<Work> work;
  {
    Flag flag;
    work = submit();
  }
  work->wait();
}

void Communicator::loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return (stopping_ && !busy_) || (!queue_.empty() && !busy_); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    run_one(op.name, op.fn, *op.work, op.seq);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
  }
}

void Communicator::run_one(const std::string& op, const std::function<void(Deadline)>& fn,
                           Work& work, uint64_t seq) {
  std::exception_ptr earlier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    earlier = broken_;
  }
  if (earlier) {
    if (trace_) trace_->ended(seq, false);
    work.finish(earlier);
    return;
  }
  if (trace_) trace_->started(seq);
  try {
    fn(std::chrono::steady_clock::now() + options_.timeout);
    if (trace_) trace_->ended(seq, true);
    work.finish(nullptr);
  } catch (...) {
    if (trace_) {
      int peer = -1;
      try {
        throw;
      } catch (const Timeout& e) {
        peer = e.peer();
      } catch (const PeerLost& e) {
        peer = e.peer();
      } catch (...) {
      }
      trace_->ended(seq, false, peer);
    }
    std::exception_ptr error = on_failure(op, std::current_exception());
    {
      std::lock_guard<std::mutex> lock(mu_);
      broken_ = error;
    }
    work.finish(error);
  }
}

// The first rank to fail records why under "<group>/abort" before breaking its links, so a
// rank that then sees one of those links close can name the peer that was really lost.
std::exception_ptr Communicator::on_failure(const std::string& op, std::exception_ptr error) {
  const std::string key = group_ + "/abort";
  std::exception_ptr result = error;
  try {
    try {
      std::rethrow_exception(error);
    } catch (const PeerLost& e) {
      if (store_->check({key})) {
        std::string why = store_->get_string(key, Millis(1000));
        auto nl = why.find('\n');
        int lost = std::atoi(why.substr(0, nl).c_str());
        result = std::make_exception_ptr(
            PeerLost(rank_, lost, op, "first seen by " + why.substr(nl + 1)));
      } else {
        store_->set(key, std::to_string(e.peer()) + "\n" + e.what());
      }
    } catch (const Timeout& e) {
      // A vote for who hung: the launcher names the rank that everyone waited for and that
      // itself waited for nobody (docs/errors.md).
      if (e.peer() >= 0)
        store_->set(group_ + "/timeout/" + std::to_string(rank_),
                    std::to_string(e.peer()) + "\n" + op);
      if (!store_->check({key}))
        store_->set(key, std::to_string(e.peer()) + "\n" + e.what());
    } catch (const Error& e) {
      if (!store_->check({key}))
        store_->set(key, std::string("-1\n") + e.what());
    }
  } catch (...) {
    // The store is unreachable too (the launcher died): keep the original error.
  }
  transport_->abort();
  if (shm_) shm_->abort();
  return result;
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is not in this group of " + std::to_string(size_));
}

std::shared_ptr<Work> Communicator::allreduce_async(const void* send, void* recv, size_t count,
                                                    DataType t, ReduceOp op,
                                                    Compression compression) {
  if (compression == Compression::kDefault) compression = options_.compression;
  if (compression == Compression::kBf16 && t == DataType::f32) {
    // Lossy: the f32 data travels and is reduced as bf16 (half the bytes), then widens back.
    std::string name = describe("allreduce", allreduce_algorithm(count * 2), count * 2) + "[bf16 wire]";
    return enqueue(name, [=](Deadline deadline) {
      std::vector<uint16_t> wire(count);
      const float* in = static_cast<const float*>(send);
      for (size_t i = 0; i < count; ++i) wire[i] = float_to_bf16(in[i]);
      run_allreduce(wire.data(), count, DataType::bf16, op, deadline, name);
      float* out = static_cast<float*>(recv);
      for (size_t i = 0; i < count; ++i) out[i] = bf16_to_float(wire[i]);
    });
  }
  const size_t bytes = count * element_size(t);
  std::string name = describe("allreduce", allreduce_algorithm(bytes), bytes);
  return enqueue(name, [=](Deadline deadline) {
    if (send != recv) std::memcpy(recv, send, bytes);
    run_allreduce(recv, count, t, op, deadline, name);
  });
}

void Communicator::run_allreduce(void* recv, size_t count, DataType t, ReduceOp op,
                                 Deadline deadline, const std::string& name) {
  const size_t bytes = count * element_size(t);
  const shm::PathCounts before = shm_ ? shm_->path_counts() : shm::PathCounts{};
  // The shared-memory form that ran, from the counters shm_allreduce bumps.
  auto shm_form = [&] {
    const shm::PathCounts& now = shm_->path_counts();
    if (now.single_copy != before.single_copy) return "shm/single_copy";
    if (now.slots != before.slots) return "shm/slots";
    if (now.small != before.small) return "shm/small";
    return "shm/none";
  };
  std::string path;
  Algorithm algorithm = allreduce_algorithm(bytes);
  // Not decided yet for this size: rank 0's record decides, else a measurement now, before
  // this call runs, so every call of the size takes one form in this run and the next.
  if (algorithm == Algorithm::kAuto) algorithm = choose_allreduce(count, t, op, deadline, name);
  switch (algorithm) {
    case Algorithm::kShm: {
      algo::ShmLinks local{*shm_, deadline, name,
                           algo::call_signature(algo::Call::allreduce, count, t, op)};
      algo::shm_allreduce(local, recv, count, t, op, bytes <= options_.shm_small_bytes, size_);
      path = shm_form();
      break;
    }
    case Algorithm::kHierarchical:
      algo::hierarchical_allreduce(*transport_, shm_.get(), topology_, recv, count, t, op,
                                   options_.small_message_bytes, deadline, name);
      path = topology_.uniform() && shm_ ? "hierarchical(" + std::string(shm_form()) + ")"
                                         : "hierarchical(leaders)";
      break;
    case Algorithm::kRecursiveDoubling: {
      algo::Links links{*transport_, deadline, name,
                        algo::call_signature(algo::Call::allreduce, count, t, op)};
      algo::recursive_doubling_allreduce(links, recv, count, t, op);
      path = "recursive_doubling";
      break;
    }
    default: {
      algo::Links links{*transport_, deadline, name,
                        algo::call_signature(algo::Call::allreduce, count, t, op)};
      algo::ring_allreduce(links, recv, count, t, op);
      path = "ring";
    }
  }
  std::string& logged = logged_paths_[size_bucket(bytes)];
  if (logged != path) {
    spdlog::debug("rank {}: {} took {}", rank_, name, path);
    logged = path;
  }
  std::lock_guard<std::mutex> lock(mu_);
  last_path_ = std::move(path);
}

std::string Communicator::last_allreduce_path() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_path_;
}

shm::PathCounts Communicator::shm_path_counts() const {
  // The counters are written on the communicator thread; a caller reads them after its
  // Work finished, which orders the two.
  return shm_ ? shm_->path_counts() : shm::PathCounts{};
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv,
                                                         size_t recv_count, DataType t,
                                                         ReduceOp op) {
  std::string name = describe("reduce_scatter", single_shm_host() ? Algorithm::kShm : Algorithm::kRing,
                              recv_count * element_size(t) * size_);
  return enqueue(name, [=](Deadline deadline) {
    if (single_shm_host()) {
      algo::ShmLinks local{*shm_, deadline, name,
                           algo::call_signature(algo::Call::reduce_scatter, recv_count, t, op)};
      return algo::shm_reduce_scatter(local, send, recv, recv_count, t, op, size_);
    }
    algo::Links links{*transport_, deadline, name,
                      algo::call_signature(algo::Call::reduce_scatter, recv_count, t, op)};
    algo::ring_reduce_scatter(links, send, recv, recv_count, t, op);
  });
}

std::shared_ptr<Work> Communicator::allgather_async(const void* send, void* recv,
                                                    size_t send_count, DataType t) {
  std::string name = describe("allgather", single_shm_host() ? Algorithm::kShm : Algorithm::kRing,
                              send_count * element_size(t) * size_);
  return enqueue(name, [=](Deadline deadline) {
    if (single_shm_host()) {
      algo::ShmLinks local{*shm_, deadline, name,
                           algo::call_signature(algo::Call::allgather, send_count, t)};
      return algo::shm_allgather(local, send, recv, send_count, t);
    }
    algo::Links links{*transport_, deadline, name,
                      algo::call_signature(algo::Call::allgather, send_count, t)};
    algo::ring_allgather(links, send, recv, send_count, t);
  });
}

std::shared_ptr<Work> Communicator::broadcast_async(void* buf, size_t count, DataType t,
                                                    int root) {
  check_peer(root, "broadcast root");
  const size_t bytes = count * element_size(t);
  const Algorithm algo = broadcast_algorithm(bytes);
  std::string name = describe("broadcast", algo, bytes);
  return enqueue(name, [=](Deadline deadline) {
    if (algo == Algorithm::kShm) {
      algo::ShmLinks local{*shm_, deadline, name,
                           algo::call_signature(algo::Call::broadcast, bytes, DataType::f32,
                                                ReduceOp::sum, root)};
      return algo::shm_broadcast(local, buf, bytes, root);
    }
    algo::Links links{*transport_, deadline, name,
                      algo::call_signature(algo::Call::broadcast, bytes, DataType::f32,
                                           ReduceOp::sum, root)};
    if (algo == Algorithm::kChain)
      algo::chain_broadcast(links, buf, bytes, root);
    else
      algo::tree_broadcast(links, buf, bytes, root);
  });
}

std::shared_ptr<Work> Communicator::reduce_async(const void* send, void* recv, size_t count,
                                                 DataType t, ReduceOp op, int root) {
  check_peer(root, "reduce root");
  std::string name = describe("reduce", single_shm_host() ? Algorithm::kShm : Algorithm::kTree,
                              count * element_size(t));
  return enqueue(name, [=](Deadline deadline) {
    if (single_shm_host()) {
      algo::ShmLinks local{*shm_, deadline, name,
                           algo::call_signature(algo::Call::reduce, count, t, op, root)};
      return algo::shm_reduce(local, send, recv, count, t, op, root, size_);
    }
    algo::Links links{*transport_, deadline, name,
                      algo::call_signature(algo::Call::reduce, count, t, op, root)};
    algo::tree_reduce(links, send, recv, count, t, op, root);
  });
}

std::shared_ptr<Work> Communicator::alltoall_async(const void* send, void* recv, size_t count,
                                                   DataType t) {
  if (send == recv && count > 0 && size_ > 1)
    throw InvalidArgument("alltoall: send and recv must be different buffers");
  std::string name =
      "alltoall(pairwise, " + std::to_string(count * element_size(t) * size_) + " B)";
  return enqueue(name, [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, name, algo::call_signature(algo::Call::alltoall, count, t)};
    algo::pairwise_alltoall(links, send, recv, count, t);
  });
}

std::shared_ptr<Work> Communicator::barrier_async() {
  return enqueue("barrier", [=](Deadline deadline) {
    if (single_shm_host()) {
      algo::ShmLinks local{*shm_, deadline, "barrier(shm)",
                           algo::call_signature(algo::Call::barrier, 0)};
      return algo::shm_barrier(local);
    }
    algo::Links links{*transport_, deadline, "barrier", algo::call_signature(algo::Call::barrier, 0)};
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
  std::string name;
  for (const P2POp& o : ops) {
    const bool send = o.kind == P2POp::Kind::kSend;
    check_peer(o.peer, send ? "send" : "recv");
    if (o.peer == rank_)
      throw InvalidArgument(std::string(send ? "send" : "recv") + ": a rank cannot " +
                            (send ? "send to" : "receive from") + " itself");
    name += std::string(name.empty() ? "" : ", ") + (send ? "send(to rank " : "recv(from rank ") +
            std::to_string(o.peer) + ", tag " + std::to_string(o.tag) + ", " +
            std::to_string(o.count * element_size(o.type)) + " B)";
  }
  if (ops.size() > 1) name = "exchange[" + name + "]";
  return enqueue(name, [this, ops = std::move(ops), name](Deadline deadline) {
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
      header.on_progress = [this, &h = headers[i], o, bytes](size_t got) {
        if (got < sizeof(P2PHeader)) return;
        if (h.magic != P2PHeader{}.magic || h.tag != o.tag || h.bytes != bytes)
          throw InvalidArgument("rank " + std::to_string(rank_) + ": recv(from rank " +
                                std::to_string(o.peer) + ", tag " + std::to_string(o.tag) +
                                ", " + std::to_string(bytes) +
                                " B) does not match the message rank " +
                                std::to_string(o.peer) + " sent (tag " + std::to_string(h.tag) +
                                ", " + std::to_string(h.bytes) + " B)");
      };
      transfers.push_back(std::move(header));
      transfers.push_back(Transfer::recv(o.peer, o.buf, bytes));
    }
    transport_->exchange(transfers.data(), transfers.size(), deadline, name);
  });
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(size_));
  allgather(mine, all.data(), 2, DataType::i32);
  const int seq = split_count_++;
  if (color < 0) return nullptr;
  std::vector<std::pair<int, int>> members;  // (key, rank here)
  for (int r = 0; r < size_; ++r)
    if (all[2 * r] == color) members.emplace_back(all[2 * r + 1], r);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[new_rank].second != rank_) ++new_rank;
  const std::string group =
      group_ + "/split" + std::to_string(seq) + "/" + std::to_string(color);
  return create(store_, group, new_rank, static_cast<int>(members.size()), options_);
}

}  // namespace heft::comm
