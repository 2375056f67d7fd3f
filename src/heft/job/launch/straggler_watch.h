// Stragglers: once a rank of a start has exited 0, the others get a grace (the job's
// stopping.straggler_grace_s) to end too; those still running after it are stragglers, which
// the supervisor stops, failing the job with a reason naming them (supervisor.h). A rank 0
// that saves a model after the others exited is the normal case the grace is for.
// Fed from LauncherHooks::on_start / on_exit (group_watch.h), whichever launcher runs the group.
//
// Deliberately left out: stopping anything (the supervisor's tick does) and what the
// stragglers were doing (their logs and the hang diagnosis, the supervisor's).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace heft::job {

class StragglerWatch {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StragglerWatch(std::chrono::milliseconds grace) : grace_(grace) {}

  // A start of `world` ranks began: none has exited.
  void start(int world);
  // Rank `rank` of the current start ended with this waitpid() status (ranks outside the
  // start, and a second report of a rank, are ignored).
  void exited(int rank, int wait_status, Clock::time_point now = Clock::now());

  // The ranks still running once `grace` has passed since the first rank exited 0; empty
  // before that, and when every rank has ended.
  std::vector<int> overdue(Clock::time_point now = Clock::now()) const;
  // The ranks that exited 0, in order.
  std::vector<int> finished() const;

  std::chrono::milliseconds grace() const { return grace_; }

 private:
  std::chrono::milliseconds grace_;
  std::vector<int> status_;  // by rank: -1 running, else the wait status
  std::optional<Clock::time_point> first_success_;
};

// "rank 3", "ranks 0, 2, 5", "ranks 0-3" (a run of more than two consecutive ranks).
std::string rank_list_text(const std::vector<int>& ascending);

}  // namespace heft::job
