// Step timings by phase, reported by a training program for the supervisor to collect: the
// small API behind heft's step profiling (docs/observability.md). heft-train uses it; any
// program linked with heft can.
//
//   profile::StepProfiler profiler = profile::StepProfiler::from_env();
//   for (...) {
//     profiler.begin_step(step);
//     { auto s = profiler.phase(profile::Phase::kData); batch = next(); }
//     { auto s = profiler.phase(profile::Phase::kForward); ... }
//     profiler.end_step();
//   }
//
// A phase inside another (DDP's wait for gradients inside backward) is taken out of the
// outer one, so the phases of a step add up to at most its time; what no phase covers is
// "other". Library code reports through profile::phase(), which times into the profiler
// made active by StepProfiler::activate() and does nothing when none is.
//
// Where it writes: $HEFT_PROFILE_DIR/rank-$RANK.steps (the supervisor sets both), one line
// a step, appended with a single write(2):
//   "<step> <end unix s> <total ms> <data> <forward> <backward> <communication> <optimizer>\n"
// Without HEFT_PROFILE_DIR every call is a no-op. One training thread: not thread-safe.
//
// Deliberately left out: GPU events, per-layer timings, sampling (every step is written).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace heft::profile {

enum class Phase { kData = 0, kForward, kBackward, kCommunication, kOptimizer };
constexpr int kPhases = 5;
// "data", "forward", "backward", "communication", "optimizer".
const char* phase_name(Phase p);

class StepProfiler {
 public:
  class Scope {
   public:
    Scope(StepProfiler* p, Phase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepProfiler* profiler_;
  };

  // Writes to `path` (appending); empty: disabled. Throws nothing: a file that cannot be
  // opened disables the profiler with one line on stderr.
  explicit StepProfiler(const std::string& path = "");
  // From HEFT_PROFILE_DIR and RANK (the one reader of HEFT_PROFILE_DIR); disabled while an
  // Off lives.
  static StepProfiler from_env();
  // While one lives in this process, from_env() gives a disabled profiler: steps that are not
  // the run's (heft-train's layout trials) are not recorded as its steps.
  class Off {
   public:
    Off();
    ~Off();
    Off(const Off&) = delete;
    Off& operator=(const Off&) = delete;
  };
  ~StepProfiler();
  StepProfiler(StepProfiler&& other) noexcept;
  StepProfiler& operator=(StepProfiler&&) = delete;
  StepProfiler(const StepProfiler&) = delete;

  bool enabled() const { return fd_ >= 0; }
  void begin_step(int64_t step);
  Scope phase(Phase p) { return Scope(enabled() ? this : nullptr, p); }
  // Ends the step begun last and writes its line.
  void end_step();
  // Makes this the profiler profile::phase() reports to (nullptr: none).
  static void activate(StepProfiler* p);
  static StepProfiler* active();

 private:
  using Clock = std::chrono::steady_clock;
  void push(Phase p);
  void pop();

  int fd_ = -1;
  int64_t step_ = -1;
  Clock::time_point step_start_;
  std::array<double, kPhases> seconds_{};
  struct Open {
    Phase phase;
    Clock::time_point start;
    double inner = 0;  // seconds of phases nested inside
  };
  std::vector<Open> open_;
};

// A scope timing `p` in the active profiler (a no-op without one).
inline StepProfiler::Scope phase(Phase p) {
  StepProfiler* a = StepProfiler::active();
  return StepProfiler::Scope(a && a->enabled() ? a : nullptr, p);
}

}  // namespace heft::profile
