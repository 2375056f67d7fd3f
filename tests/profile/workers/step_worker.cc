// A training-shaped worker for the profiler's job tests: each step sleeps through the
// phases (data, forward, backward), allreduces a small buffer (the communication phase),
// reports the step through the step profiler and prints "step=N loss=L". Misbehaviour on
// request:
//   --steps N         steps to run (default 40)
//   --phase-ms M      milliseconds slept in each of data, forward, backward (default 5)
//   --slow-rank R     this rank sleeps --slow-ms more in data every --slow-every steps
//   --slow-ms S, --slow-every K
//   --stall-rank R    this rank stops (sleeps for an hour) before step --stall-step
//   --stall-step K
//   --loss-flat       the printed loss stays at 1.0 (else it falls as 1/step)
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

}  // namespace

int main(int argc, char** argv) {
  int steps = 40, slow_rank = -1, slow_every = 4, stall_rank = -1, stall_step = 5;
  double phase_ms = 5, slow_ms = 200;
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
    else if (a == "--loss-flat") loss_flat = true;
    // hyperparameters of the spec arrive as --name value pairs too: ignore the others
  }
  heft::comm::World world = heft::comm::init();
  heft::comm::Communicator& comm = *world.comm;
  const int rank = comm.rank();
  heft::profile::StepProfiler profiler = heft::profile::StepProfiler::from_env();
  std::vector<float> grad(256, 1.0f);
  for (int step = 1; step <= steps; ++step) {
    if (rank == stall_rank && step == stall_step) sleep_ms(3600e3);
    profiler.begin_step(step);
    {
      auto p = profiler.phase(heft::profile::Phase::kData);
      sleep_ms(phase_ms + (rank == slow_rank && step % slow_every == 0 ? slow_ms : 0));
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kForward);
      sleep_ms(phase_ms);
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kBackward);
      sleep_ms(phase_ms);
    }
    {
      auto p = profiler.phase(heft::profile::Phase::kCommunication);
      comm.allreduce(grad.data(), grad.data(), grad.size(), heft::comm::DataType::f32,
                     heft::comm::ReduceOp::sum);
    }
    profiler.end_step();
    if (rank == 0) {
      std::printf("step=%d loss=%.4f\n", step, loss_flat ? 1.0 : 1.0 / step);
      std::fflush(stdout);
    }
  }
  return 0;
}
