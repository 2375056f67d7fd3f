// The worker shim (worker_shim.h).
//
// Two threads: the main one starts the child, forwards signals (its handlers only set bits)
// and reaps, polling every kPollMicros; a watcher thread, started with the launcher's signals
// blocked, holds the store connection and asks its CHECK, so a store that does not answer
// never delays a forwarded signal.
#include "heft/job/launch/worker_shim.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "heft/comm/store/tcp_store.h"
#include "heft/contract/worker.h"
#include "heft/error.h"
#include "heft/job/launch/process.h"
#include "heft/job/launch/signal_pipe.h"

namespace heft::job {

namespace {

using Clock = std::chrono::steady_clock;
constexpr useconds_t kPollMicros = 20000;
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

std::atomic<unsigned> g_pending{0};  // bit s: signal s arrived and is not forwarded yet
static_assert(std::atomic<unsigned>::is_always_lock_free);

void note_signal(int sig) { g_pending.fetch_or(1u << sig); }

std::string variable(const Environment& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// Holds the connection to the supervisor's store and says when the supervisor is gone.
class SupervisorWatch {
 public:
  SupervisorWatch(std::string address, std::string token, std::string key,
                  std::string sample_key, const ShimOptions& o)
      : address_(std::move(address)), token_(std::move(token)), key_(std::move(key)),
        sample_key_(std::move(sample_key)), every_(o.check_every), silence_(o.silence),
        sample_(o.sample), sample_every_(o.sample_every) {
    ScopedSignalBlock block;  // the handlers run on the main thread only
    thread_ = std::thread([this] { watch(); });
  }
  ~SupervisorWatch() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SupervisorWatch(const SupervisorWatch&) = delete;
  SupervisorWatch& operator=(const SupervisorWatch&) = delete;

  // The child to sample from now on.
  void set_child(int pid) { child_.store(pid); }

  // Why the supervisor is taken for gone; nothing while it answers.
  std::optional<std::string> lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

  // Best effort: `key` = value in the store, once connected (within `silence`).
  void record(const std::string& key, const std::string& value) {
    std::shared_ptr<comm::TcpStore> store;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, silence_, [this] { return store_ || lost_; });
      if (lost_ || !store_) return;
      store = store_;
    }
    try {
      store->set(key, value);
    } catch (const Error&) {
      // The supervisor is going or gone: nobody is left to read it.
    }
  }

 private:
  void watch() {
    try {
      std::shared_ptr<comm::TcpStore> store = comm::TcpStore::connect(address_, token_, silence_);
      store->set_timeout(silence_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        store_ = store;
      }
      cv_.notify_all();
      Clock::time_point next_sample = Clock::now();
      const bool sampling = sample_ && sample_every_.count() > 0;
      const auto wait = sampling ? std::min(every_, sample_every_) : every_;
      for (;;) {
        store->check({key_});
        if (sampling && child_.load() > 0 && Clock::now() >= next_sample) {
          next_sample = Clock::now() + sample_every_;
          const std::string text = sample_(child_.load());
          if (!text.empty()) store->set(sample_key_, text);
        }
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, wait, [this] { return done_; })) return;
      }
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!done_) lost_ = std::string(e.what());
      }
      cv_.notify_all();
    }
  }

  const std::string address_, token_, key_, sample_key_;
  const std::chrono::milliseconds every_, silence_;
  const std::function<std::string(int)> sample_;
  const std::chrono::milliseconds sample_every_;
  std::atomic<int> child_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::optional<std::string> lost_;
  std::shared_ptr<comm::TcpStore> store_;
  std::thread thread_;
};

// While alive, the forwarded signals only set their bit in g_pending.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    struct sigaction sa {};
    sa.sa_handler = note_signal;
    for (int sig : kForwarded) ::sigaction(sig, &sa, &old_[index(sig)]);
  }
  ~ForwardedSignals() {
    for (int sig : kForwarded) ::sigaction(sig, &old_[index(sig)], nullptr);
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;

 private:
  static size_t index(int sig) {
    for (size_t i = 0; i < std::size(kForwarded); ++i)
      if (kForwarded[i] == sig) return i;
    return 0;
  }
  struct sigaction old_[std::size(kForwarded)] {};
};

// Ends this process as the child ended: its signal raised here, else its code.
int mirror(int wait_status) {
  if (!WIFSIGNALED(wait_status)) return shell_exit_code(wait_status);
  const int sig = WTERMSIG(wait_status);
  ::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(sig);
  return 128 + sig;
}

}  // namespace

int run_worker_shim(const Environment& env, const std::vector<std::string>& command,
                    const ShimOptions& options) {
  ForwardedSignals forwarded;
  // The engine that read our stderr may be gone with the supervisor (mpirun is): a write to
  // it must not end the shim before it has stopped the rank. The rank gets SIG_DFL back.
  ::signal(SIGPIPE, SIG_IGN);
  const contract::HeftVariables heft = contract::HeftVariables::read(env);
  const std::string address = heft.store.value_or("");
  const std::string token = heft.token.value_or("");
  const std::string job = heft.job_name();
  const std::string rank = variable(env, "RANK");
  std::unique_ptr<SupervisorWatch> watch;
  if (!address.empty() && !token.empty())
    watch = std::make_unique<SupervisorWatch>(address, token, job + "/world/supervisor",
                                              job + "/world/system/" + rank, options);
  std::unique_ptr<Process> child;
  try {
    child = Process::spawn(SpawnOptions{command, env, false, {}, -1, -1, /*opt_ml=*/true});
  } catch (const SpawnError& e) {
    std::cerr << options.name << ": " << e.what() << std::endl;
    return e.exit_code();
  }
  if (watch && !rank.empty()) watch->set_child(child->pid());
  const std::chrono::milliseconds grace(heft.stop_grace());
  bool stopping = false;
  Clock::time_point kill_at = Clock::time_point::max();  // max: no SIGKILL due
  while (!child->try_reap()) {
    const unsigned pending = g_pending.exchange(0);
    for (int sig : kForwarded)
      if (pending & (1u << sig)) child->signal_group(sig);
    if (!stopping && watch) {
      if (const std::optional<std::string> why = watch->lost()) {
        stopping = true;
        std::cerr << options.name << ": rank " << rank << ": the supervisor is gone (its store at "
                  << address << ": " << *why << "); stopping '" << command[0]
                  << "' (SIGTERM, SIGKILL after " << grace.count() << " ms)" << std::endl;
        child->signal_group(SIGTERM);
        kill_at = Clock::now() + grace;
      }
    }
    if (Clock::now() >= kill_at) {
      child->signal_group(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    ::usleep(kPollMicros);
  }
  const int status = child->wait_status();
  if (watch && !stopping && !rank.empty())
    watch->record(job + "/world/exit/" + rank, std::to_string(status));
  watch.reset();
  return mirror(status);
}

}  // namespace heft::job
