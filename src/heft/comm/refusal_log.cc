#include "heft/comm/refusal_log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

namespace heft::comm {

namespace {

std::atomic<uint64_t> g_refused{0};

struct Limiter {
  std::mutex mu;
  std::chrono::steady_clock::time_point last{};
  bool any = false;
  uint64_t hidden = 0;
  // Errors go to stderr (docs/errors.md), whatever the default logger prints to.
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>(
      "heft-refusals", std::make_shared<spdlog::sinks::stderr_sink_mt>());
};

Limiter& limiter() {
  static Limiter* l = new Limiter();  // outlives every thread that may still log at exit
  return *l;
}

}  // namespace

void log_refused(const std::string& where, const std::string& peer, const std::string& why) {
  ++g_refused;
  Limiter& l = limiter();
  std::lock_guard<std::mutex> lock(l.mu);
  const auto now = std::chrono::steady_clock::now();
  if (l.any && now - l.last < std::chrono::seconds(1)) {
    ++l.hidden;
    return;
  }
  l.any = true;
  l.last = now;
  if (l.hidden)
    l.log->warn("{}: refused a connection from {}: {} ({} more refused since the last report)",
                where, peer, why, l.hidden);
  else
    l.log->warn("{}: refused a connection from {}: {}", where, peer, why);
  l.hidden = 0;
}

uint64_t refused_connections() { return g_refused.load(); }

}  // namespace heft::comm
