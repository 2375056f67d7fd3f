// A training-shaped worker for the profiler's job tests: each step sleeps through the
// phases (data, forward, backward), allreduces a small buffer (the communication phase),
// reports the step through the step profiler and prints "step=N loss=L". Misbehaviour on
// request:
//   --steps N         steps to run (default 40)
//   --phase-ms M      milliseconds slept in each of data, forward, backward (default 5)
//   --slow-rank R     this rank sleeps --slow-ms more in data every --slow-every steps
//   --slow-ms S, --slow-every K
//   --busy-rank R     this rank is CPU-bound: it spins instead of sleeping in its phases and
//   --busy-ms B       spins B ms more in data each step (default 40): a loader that computes
//   --stall-rank R    this rank stops (sleeps for an hour) before step --stall-step
//   --stall-step K
//   --loss-flat       the printed loss stays at 1.0 (else it falls as 1/step)
//   --join-delay-rank R  this rank sleeps --join-delay-ms (default 2000) before it joins the
//   --join-delay-ms D    group, so the others' link listeners stay open that long
// Every step's allreduce is checked (ones summed: the world size); a wrong value ends the rank
// with exit code 3, naming the step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "heft/comm/init.h"
#include "heft/step_profiler/step_profiler.h"

namespace {

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(ms * 1000)));
}

// Keeps a core busy for `ms` milliseconds of wall time.
void spin_ms(double ms) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::microseconds(static_cast<long>(ms * 1000));
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < end)
    for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, slow_rank = -1, slow_every = 4, stall_rank = -1, stall_step = 5, busy_rank = -1,
      join_delay_rank = -1;
  double phase_ms = 5, slow_ms = 200, busy_ms = 40, join_delay_ms = 2000;
  bool loss_flat = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atof(argv[++i]) : 0.0; };
    if (a == "--steps") steps = static_cast<int>(next());
    else if (a == "--phase-ms") phase_ms = next();
    else if (a == "--slow-rank") slow_rank = static_cast<int>(next());
    else if (a == "--slow-ms") slow_ms = next();
    else if (a == "--slow-every") slow_every = static_cast<int>(next());
    else if (a == "--stall-rank") stall_rank = static_cast<int>(next());
    else if (a == "--stall-step") stall_step = static_cast<int>(next());
    else if (a == "--busy-rank") busy_rank = static_cast<int>(next());
    else if (a == "--busy-ms") busy_ms = next();
    else if (a == "--loss-flat") loss_flat = true;
    else if (a == "--join-delay-rank") join_delay_rank = static_cast<int>(next());
    else if (a == "--join-delay-ms") join_delay_ms = next();
    // hyperparameters of the spec arrive as --name value pairs too: ignore the others
  }
  const char* rank_env = std::getenv("RANK");
  if (rank_env && std::atoi(rank_env) == join_delay_rank) sleep_ms(join_delay_ms);
  heft::comm::World world = heft::comm::init();
  heft::comm::Communicator& comm = *world.comm;
  const int rank = comm.rank();
  const bool busy = rank == busy_rank;
  auto work_ms = [busy](double ms) { busy ? spin_ms(ms) : sleep_ms(ms); };
  heft::profile::StepProfiler profiler = heft::profile::StepProfiler::from_env();
  std::vector<float> grad(256, 1.0f);
  for (int step = 1; step <= steps; ++step) {
    if (rank == stall_rank && step == stall_step) sleep_ms(3600e3);
    profiler.begin_step(step);
    {
      auto p = profiler.phase(heft::profile::Phase::kData);
      sleep_ms(rank == slow_rank && step % slow_every == 0 ? slow_ms : 0);
      work_ms(phase_ms + (busy ? busy_ms : 0));
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kForward);
      work_ms(phase_ms);
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kBackward);
      work_ms(phase_ms);
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kCommunication);
      std::fill(grad.begin(), grad.end(), 1.0f);
      comm.allreduce(grad.data(), grad.data(), grad.size(), heft::comm::DataType::f32,
                     heft::comm::ReduceOp::sum);
    }
    for (float g : grad)
      if (g != static_cast<float>(comm.size())) {
        std::fprintf(stderr, "rank %d step %d: allreduce gave %g, expected %d\n", rank, step, g,
                     comm.size());
        return 3;
      }
    profiler.end_step();
    if (rank == 0) {
      std::printf("step=%d loss=%.4f\n", step, loss_flat ? 1.0 : 1.0 / step);
      std::fflush(stdout);
    }
  }
  return 0;
}
