#include "heft/parallel/layout/host_probe.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "heft/error.h"
#include "heft/parallel/layout/comm_measure.h"

namespace heft::parallel::layout {

namespace {

double cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void check(const comm::Communicator& world, const HostProbeOptions& o) {
  if (o.rounds < 1) throw InvalidArgument("host_probe.rounds: expected at least 1, found " + std::to_string(o.rounds));
  if (o.warmup < 0) throw InvalidArgument("host_probe.warmup: expected at least 0, found " + std::to_string(o.warmup));
  (void)group_sizes(world.size(), o.groups, "host_probe.groups");
}

// The work's median CPU seconds per call over `rounds` after `warmup`.
double cpu_per_call(const std::function<void()>& work, const HostProbeOptions& o) {
  for (int i = 0; i < o.warmup; ++i) work();
  std::vector<double> t;
  for (int i = 0; i < o.rounds; ++i) {
    const double t0 = cpu_seconds();
    work();
    t.push_back(cpu_seconds() - t0);
  }
  return median(std::move(t));
}

// World rank 0's wall seconds of `rounds` calls of the work on every rank, each followed by a
// one-float all-reduce of `group` when `sync`, between two world barriers.
double timed_run(comm::Communicator& world, comm::Communicator& group, const std::function<void()>& work,
                 int rounds, bool sync) {
  float one = 1, sum = 0;
  world.barrier();
  const double t0 = wall_seconds();
  for (int i = 0; i < rounds; ++i) {
    work();
    if (sync) group.allreduce(&one, &sum, 1, comm::DataType::f32, comm::ReduceOp::sum);
  }
  world.barrier();
  return wall_seconds() - t0;
}

}  // namespace

double measure_inflation(comm::Communicator& world, const std::function<void()>& work, const HostProbeOptions& o) {
  check(world, o);
  if (world.size() == 1) return 1;
  double alone = 0;
  world.barrier();
  if (world.rank() == 0) alone = cpu_per_call(work, o);  // the others asleep in the barrier
  world.barrier();
  double together = cpu_per_call(work, o);
  world.allreduce(&together, 1, comm::DataType::f64, comm::ReduceOp::sum);
  double ratio = alone > 0 ? together / world.size() / alone : 1;
  world.broadcast(&ratio, 1, comm::DataType::f64, 0);
  return ratio;
}

std::vector<SyncDelay> measure_sync_delay(comm::Communicator& world, const std::function<void()>& work,
                                          const CommTable& comm, const HostProbeOptions& o) {
  check(world, o);
  std::vector<SyncDelay> out;
  if (world.size() == 1) return out;
  const std::vector<int> groups = group_sizes(world.size(), o.groups, "host_probe.groups");
  for (int w = 0; w < o.warmup; ++w) work();
  for (int g : groups) {
    std::unique_ptr<comm::Communicator> split;
    comm::Communicator* group = &world;
    if (g < world.size()) {
      split = world.split(world.rank() / g, world.rank());
      group = split.get();
    }
    // Alternated (without, with) x 3: a burst of other load spoils one pair, not the median.
    std::vector<double> diffs;
    for (int pair = 0; pair < 3; ++pair) {
      const double without = timed_run(world, *group, work, o.rounds, false);
      const double with = timed_run(world, *group, work, o.rounds, true);
      diffs.push_back((with - without) / o.rounds);
    }
    const double own = comm.seconds(Collective::kAllReduce, g, static_cast<int64_t>(sizeof(float)));
    double delay = std::max(0.0, median(std::move(diffs)) - own);
    world.broadcast(&delay, 1, comm::DataType::f64, 0);
    out.push_back({g, delay});
  }
  return out;
}

std::string describe_host_terms(double compute_inflation, double step_inflation, const std::vector<SyncDelay>& sync) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "compute x%.2f, step x%.2f, synchronisation", compute_inflation, step_inflation);
  std::ostringstream os;
  os << buf;
  if (sync.empty()) os << " not measured";
  for (size_t i = 0; i < sync.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s %.3f ms (g %d)", i ? "," : "", sync[i].seconds * 1e3, sync[i].group);
    os << buf;
  }
  return os.str();
}

}  // namespace heft::parallel::layout
