#include "heft/comm/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

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
#include "heft/comm/transport/tcp/context.h"

namespace heft::comm {

namespace {

constexpr const char* kAlgorithmNames[] = {"auto", "ring", "recursive_doubling", "tree", "chain"};

std::string describe(const char* verb, Algorithm a, size_t bytes) {
  return std::string(verb) + "(" + name(a) + ", " + std::to_string(bytes) + " B)";
}

// Header of a point-to-point message, checked by the receiver.
struct P2PHeader {
  uint32_t magic = 0x50325048;  // "HP2P"
  uint32_t tag = 0;
  uint64_t bytes = 0;
};

std::string env_or(const char* var, const std::string& fallback) {
  const char* v = std::getenv(var);
  return v && *v ? std::string(v) : fallback;
}

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

}  // namespace

const char* name(Algorithm a) { return kAlgorithmNames[static_cast<int>(a)]; }

Algorithm parse_algorithm(const std::string& s) {
  for (int i = 0; i < 5; ++i)
    if (s == kAlgorithmNames[i]) return static_cast<Algorithm>(i);
  throw InvalidArgument("unknown algorithm '" + s +
                        "': expected one of auto, ring, recursive_doubling, tree, chain");
}

CommunicatorOptions CommunicatorOptions::from_env() {
  CommunicatorOptions o;
  o.token = env_or("HEFT_TOKEN", "");
  o.timeout = std::chrono::seconds(env_number("HEFT_TIMEOUT", 300, 1));
  try {
    o.allreduce_algorithm = parse_algorithm(env_or("HEFT_ALLREDUCE_ALGO", "auto"));
    o.broadcast_algorithm = parse_algorithm(env_or("HEFT_BROADCAST_ALGO", "auto"));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(std::string("HEFT_ALLREDUCE_ALGO / HEFT_BROADCAST_ALGO: ") + e.what());
  }
  o.small_message_bytes =
      static_cast<size_t>(env_number("HEFT_SMALL_MESSAGE_BYTES", 64 << 10, 0));
  o.bind_address = env_or("HEFT_BIND_ADDRESS", o.bind_address);
  return o;
}

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
  return std::unique_ptr<Communicator>(new Communicator(
      std::move(store), group, rank, size, std::move(options), std::move(transport)));
}

Communicator::Communicator(std::shared_ptr<Store> store, std::string group, int rank, int size,
                           CommunicatorOptions options, std::unique_ptr<Transport> transport)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      transport_(std::move(transport)) {
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
  if (options_.allreduce_algorithm != Algorithm::kAuto) return options_.allreduce_algorithm;
  return bytes <= options_.small_message_bytes ? Algorithm::kRecursiveDoubling
                                               : Algorithm::kRing;
}

Algorithm Communicator::broadcast_algorithm(size_t bytes) const {
  if (options_.broadcast_algorithm != Algorithm::kAuto) return options_.broadcast_algorithm;
  return bytes <= options_.small_message_bytes ? Algorithm::kTree : Algorithm::kChain;
}

std::shared_ptr<Work> Communicator::enqueue(std::string op, std::function<void(Deadline)> fn) {
  auto work = std::make_shared<Work>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Op{std::move(op), std::move(fn), work});
  }
  cv_.notify_all();
  return work;
}

void Communicator::loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    run_one(op.name, op.fn, *op.work);
  }
}

void Communicator::run_one(const std::string& op, const std::function<void(Deadline)>& fn,
                           Work& work) {
  std::exception_ptr earlier;
  {
    std::lock_guard<std::mutex> lock(mu_);
    earlier = broken_;
  }
  if (earlier) {
    work.finish(earlier);
    return;
  }
  try {
    fn(std::chrono::steady_clock::now() + options_.timeout);
    work.finish(nullptr);
  } catch (...) {
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
    } catch (const Error& e) {
      if (!store_->check({key}))
        store_->set(key, std::string("-1\n") + e.what());
    }
  } catch (...) {
    // The store is unreachable too (the launcher died): keep the original error.
  }
  transport_->abort();
  return result;
}

void Communicator::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size_)
    throw InvalidArgument(std::string(what) + ": rank " + std::to_string(peer) +
                          " is not in this group of " + std::to_string(size_));
}

std::shared_ptr<Work> Communicator::allreduce_async(const void* send, void* recv, size_t count,
                                                    DataType t, ReduceOp op) {
  const size_t bytes = count * element_size(t);
  const Algorithm algo = allreduce_algorithm(bytes);
  std::string name = describe("allreduce", algo, bytes);
  return enqueue(name, [=](Deadline deadline) {
    if (send != recv) std::memcpy(recv, send, bytes);
    algo::Links links{*transport_, deadline, name};
    if (algo == Algorithm::kRecursiveDoubling || algo == Algorithm::kTree)
      algo::recursive_doubling_allreduce(links, recv, count, t, op);
    else
      algo::ring_allreduce(links, recv, count, t, op);
  });
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(const void* send, void* recv,
                                                         size_t recv_count, DataType t,
                                                         ReduceOp op) {
  std::string name = describe("reduce_scatter", Algorithm::kRing,
                              recv_count * element_size(t) * size_);
  return enqueue(name, [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, name};
    algo::ring_reduce_scatter(links, send, recv, recv_count, t, op);
  });
}

std::shared_ptr<Work> Communicator::allgather_async(const void* send, void* recv,
                                                    size_t send_count, DataType t) {
  std::string name =
      describe("allgather", Algorithm::kRing, send_count * element_size(t) * size_);
  return enqueue(name, [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, name};
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
    algo::Links links{*transport_, deadline, name};
    if (algo == Algorithm::kChain || algo == Algorithm::kRing)
      algo::chain_broadcast(links, buf, bytes, root);
    else
      algo::tree_broadcast(links, buf, bytes, root);
  });
}

std::shared_ptr<Work> Communicator::reduce_async(const void* send, void* recv, size_t count,
                                                 DataType t, ReduceOp op, int root) {
  check_peer(root, "reduce root");
  std::string name = describe("reduce", Algorithm::kTree, count * element_size(t));
  return enqueue(name, [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, name};
    algo::tree_reduce(links, send, recv, count, t, op, root);
  });
}

std::shared_ptr<Work> Communicator::alltoall_async(const void* send, void* recv, size_t count,
                                                   DataType t) {
  if (send == recv && count > 0 && size_ > 1)
    throw InvalidArgument("alltoall: send and recv must be different buffers");
  std::string name = describe("alltoall", Algorithm::kRing, count * element_size(t) * size_);
  return enqueue(name, [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, name};
    algo::pairwise_alltoall(links, send, recv, count, t);
  });
}

std::shared_ptr<Work> Communicator::barrier_async() {
  return enqueue("barrier", [=](Deadline deadline) {
    algo::Links links{*transport_, deadline, "barrier"};
    algo::dissemination_barrier(links);
  });
}

std::shared_ptr<Work> Communicator::send_async(const void* buf, size_t count, DataType t,
                                               int peer, uint32_t tag) {
  check_peer(peer, "send");
  if (peer == rank_) throw InvalidArgument("send: a rank cannot send to itself");
  const size_t bytes = count * element_size(t);
  std::string name = "send(to rank " + std::to_string(peer) + ", tag " + std::to_string(tag) +
                     ", " + std::to_string(bytes) + " B)";
  return enqueue(name, [=](Deadline deadline) {
    P2PHeader h;
    h.tag = tag;
    h.bytes = bytes;
    Transfer ts[2] = {Transfer::send(peer, &h, sizeof(h)), Transfer::send(peer, buf, bytes)};
    transport_->exchange(ts, 2, deadline, name);
  });
}

std::shared_ptr<Work> Communicator::recv_async(void* buf, size_t count, DataType t, int peer,
                                               uint32_t tag) {
  check_peer(peer, "recv");
  if (peer == rank_) throw InvalidArgument("recv: a rank cannot receive from itself");
  const size_t bytes = count * element_size(t);
  std::string name = "recv(from rank " + std::to_string(peer) + ", tag " +
                     std::to_string(tag) + ", " + std::to_string(bytes) + " B)";
  return enqueue(name, [=](Deadline deadline) {
    P2PHeader h, expected;
    expected.tag = tag;
    expected.bytes = bytes;
    algo::Links links{*transport_, deadline, name};
    links.recv(peer, &h, sizeof(h));
    if (h.magic != expected.magic || h.tag != tag || h.bytes != bytes)
      throw InvalidArgument("rank " + std::to_string(rank_) + ": " + name +
                            " does not match the message rank " + std::to_string(peer) +
                            " sent (tag " + std::to_string(h.tag) + ", " +
                            std::to_string(h.bytes) + " B)");
    links.recv(peer, buf, bytes);
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
