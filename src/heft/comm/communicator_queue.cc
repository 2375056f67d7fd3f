// The communicator's operation queue (communicator_impl.h): operations run one at a time in
// issue order, on the communicator's thread or, for a blocking call on an idle communicator,
// on the caller's; a failure records why in the store, breaks the links and is rethrown by
// every later call.
#include <pthread.h>

#include <cstdlib>
#include <utility>

#include <spdlog/spdlog.h>

#include "heft/comm/choice_cache.h"  // choice_cache_path
#include "heft/comm/communicator_impl.h"
#include "heft/error.h"

namespace heft::comm {

namespace {
// Set by Communicator::blocking() around its submit call on this thread: enqueue may then run
// inline.
thread_local bool t_blocking_call = false;
}  // namespace

Communicator::Impl::Impl(std::shared_ptr<Store> store, std::string group, int rank, int size,
                         CommunicatorOptions options, std::unique_ptr<Transport> transport,
                         Topology topology, std::unique_ptr<shm::Context> shm,
                         ShmCores cores)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      transport_(std::move(transport)),
      topology_(std::move(topology)),
      shm_(std::move(shm)),
      cores_(std::move(cores)) {
  for (auto& m : measured_) m.store(-1, std::memory_order_relaxed);
  if (rank_ == 0) choice_cache_ = choice_cache_path();
  if (shm_) {
    // A peer blocked in shared memory cannot see a socket close; look at its TCP link
    // while waiting for it.
    shm_->set_liveness_check([this](int local_peer, const std::string& op) {
      transport_->check_link(topology_.local()[local_peer], op);
    });
    // One host: a probe's reading is classified by this machine's record (classify_far), on
    // both ranks at the same probe (its timing runs over every rank of the group).
    if (options_.measure_far_line && single_shm_host())
      shm_->set_far_classifier([this](uint32_t ns, bool line_far, size_t bytes, Deadline deadline,
                                      const std::string& op) { return classify_far(ns, line_far, bytes, deadline, op); });
  }
  if (cores_.core)
    cores_.core->set_liveness_check([this](int local_peer, const std::string& op) {
      transport_->check_link(cores_.core_ranks[local_peer], op);
    });
  if (cores_.leaders)
    cores_.leaders->set_liveness_check([this](int local_peer, const std::string& op) {
      transport_->check_link(cores_.leader_ranks[local_peer], op);
    });
  try {
    const char* world_rank = std::getenv("RANK");
    trace_ = CollectiveTrace::open(CollectiveTrace::dir_from_env(), group_, rank_, size_,
                                   world_rank && *world_rank ? std::atoi(world_rank) : rank_);
  } catch (const Error& e) {
    spdlog::warn("rank {}: no collective trace: {}", rank_, e.what());
  }
  thread_ = std::thread([this] { loop(); });
  // Named, so that its wake-ups can be read from /proc/<pid>/task/*/ (collectives_test).
  pthread_setname_np(thread_.native_handle(), "heft-comm");
}

Communicator::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<Work> Communicator::Impl::enqueue(std::string op,
                                                  std::function<void(Deadline)> fn) {
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
  bool wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
    // The communicator's thread waits for queued work or the stop: wake it only for one of
    // those (an operation queued, or the stop asked, while this one ran). Waking it after
    // every inline call cost each blocking caller a futex wake and, on a busy machine, a
    // context switch to a thread that only went back to sleep.
    wake = !queue_.empty() || stopping_;
  }
  if (wake) cv_.notify_all();
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

void Communicator::Impl::loop() {
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

void Communicator::Impl::run_one(const std::string& op, const std::function<void(Deadline)>& fn,
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
// "First" is decided by the store (an add on "<group>/abort-order": one round trip, atomic),
// not by looking for the record: a store may apply a set after it answered another client
// (torch's TCPStore does not wait for the server on set), so a rank two hops from the lost
// one could look before its neighbour's record landed and record its neighbour instead. The
// first waits for its record to be readable before it breaks any link; every later rank
// waits for the record (at most kRecordWait) and, when it lost a peer itself, names the
// peer in the record.
std::exception_ptr Communicator::Impl::on_failure(const std::string& op,
                                                  std::exception_ptr error) {
  constexpr Millis kRecordWait{2000};
  const std::string key = group_ + "/abort";
  std::exception_ptr result = error;
  int peer = -1;
  bool lost = false;
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost& e) {
    peer = e.peer(), lost = true, what = e.what();
  } catch (const Timeout& e) {
    peer = e.peer(), what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "unknown error";
  }
  try {
    // A vote for who hung: the launcher names the rank that everyone waited for and that
    // itself waited for nobody (docs/errors.md).
    if (!lost && peer >= 0)
      store_->set(group_ + "/timeout/" + std::to_string(rank_), std::to_string(peer) + "\n" + op);
    if (store_->add(group_ + "/abort-order", 1) == 1) {
      store_->set(key, std::to_string(peer) + "\n" + what);
      store_->get(key, kRecordWait);  // readable by every rank before a link breaks
    } else {
      const std::string why = store_->get_string(key, kRecordWait);
      const auto nl = why.find('\n');
      if (lost && nl != std::string::npos)
        result = std::make_exception_ptr(PeerLost(rank_, std::atoi(why.substr(0, nl).c_str()), op,
                                                  "first seen by " + why.substr(nl + 1)));
    }
  } catch (...) {
    // The store is unreachable too (the launcher died), or the first rank died before its
    // record landed: keep the original error.
  }
  transport_->abort();
  if (shm_) shm_->abort();
  if (cores_.core) cores_.core->abort();
  if (cores_.leaders) cores_.leaders->abort();
  return result;
}

}  // namespace heft::comm
