#include "heft/step_profiler/step_profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace heft::profile {

namespace {
StepProfiler* g_active = nullptr;

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kCommunication: return "communication";
    case Phase::kOptimizer: return "optimizer";
  }
  return "?";
}

StepProfiler::Scope::Scope(StepProfiler* p, Phase phase) : profiler_(p) {
  if (profiler_) profiler_->push(phase);
}

StepProfiler::Scope::~Scope() {
  if (profiler_) profiler_->pop();
}

StepProfiler::StepProfiler(const std::string& path) {
  if (path.empty()) return;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0)
    std::fprintf(stderr, "heft: step profiling off: cannot open %s: %s\n", path.c_str(),
                 std::strerror(errno));
}

namespace {
std::atomic<int> g_off{0};  // StepProfiler::Off objects alive
}  // namespace

StepProfiler::Off::Off() { g_off.fetch_add(1); }
StepProfiler::Off::~Off() { g_off.fetch_sub(1); }

StepProfiler StepProfiler::from_env() {
  if (g_off.load() > 0) return StepProfiler();
  const char* dir = std::getenv("HEFT_PROFILE_DIR");
  const char* rank = std::getenv("RANK");
  if (!dir || !*dir) return StepProfiler();
  return StepProfiler(std::string(dir) + "/rank-" + (rank && *rank ? rank : "0") + ".steps");
}

StepProfiler::~StepProfiler() {
  if (g_active == this) g_active = nullptr;
  if (fd_ >= 0) ::close(fd_);
}

StepProfiler::StepProfiler(StepProfiler&& other) noexcept
    : fd_(other.fd_), step_(other.step_), step_start_(other.step_start_),
      seconds_(other.seconds_), open_(std::move(other.open_)) {
  other.fd_ = -1;
}

void StepProfiler::activate(StepProfiler* p) { g_active = p; }
StepProfiler* StepProfiler::active() { return g_active; }

void StepProfiler::begin_step(int64_t step) {
  step_ = step;
  step_start_ = Clock::now();
  seconds_.fill(0);
  open_.clear();
}

void StepProfiler::push(Phase p) { open_.push_back({p, Clock::now(), 0}); }

void StepProfiler::pop() {
  if (open_.empty()) return;
  const Open o = open_.back();
  open_.pop_back();
  const double wall = std::chrono::duration<double>(Clock::now() - o.start).count();
  seconds_[static_cast<int>(o.phase)] += wall - o.inner;
  if (!open_.empty()) open_.back().inner += wall;
}

void StepProfiler::end_step() {
  if (fd_ < 0 || step_ < 0) return;
  const double total = std::chrono::duration<double>(Clock::now() - step_start_).count();
  char line[256];
  const int n = std::snprintf(line, sizeof(line), "%lld %.6f %.4f %.4f %.4f %.4f %.4f %.4f\n",
                              static_cast<long long>(step_), unix_seconds(), total * 1e3,
                              seconds_[0] * 1e3, seconds_[1] * 1e3, seconds_[2] * 1e3,
                              seconds_[3] * 1e3, seconds_[4] * 1e3);
  if (n > 0 && ::write(fd_, line, static_cast<size_t>(n)) < 0) {
    ::close(fd_);  // a full disk: stop profiling, keep training
    fd_ = -1;
  }
  step_ = -1;
}

}  // namespace heft::profile
