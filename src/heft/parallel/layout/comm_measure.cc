#include "heft/parallel/layout/comm_measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>

#include "heft/error.h"

namespace heft::parallel::layout {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void check(const comm::Communicator& world, const MeasureOptions& o) {
  for (int64_t b : o.bytes)
    if (b < 4) throw InvalidArgument("measure.bytes: expected sizes of at least 4 bytes, found " + std::to_string(b));
  if (o.bytes.empty()) throw InvalidArgument("measure.bytes: expected at least one size, found none");
  if (o.warmup < 0) throw InvalidArgument("measure.warmup: expected at least 0, found " + std::to_string(o.warmup));
  if (o.repeats < 1) throw InvalidArgument("measure.repeats: expected at least 1, found " + std::to_string(o.repeats));
  (void)group_sizes(world.size(), o.groups, "measure.groups");
}

// Seconds of one call of `c` moving `bytes` on `group` (the file comment's convention),
// after a barrier of the group. p2p: half of a round trip between ranks 0 and 1 of a pair.
double time_once(comm::Communicator& group, Collective c, int64_t bytes, std::vector<float>& a,
                 std::vector<float>& b) {
  const size_t n = static_cast<size_t>(bytes) / sizeof(float);
  const size_t g = static_cast<size_t>(group.size());
  group.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  switch (c) {
    case Collective::kAllReduce: group.allreduce(a.data(), b.data(), n, comm::DataType::f32, comm::ReduceOp::sum); break;
    case Collective::kReduceScatter:
      group.reduce_scatter(a.data(), b.data(), std::max<size_t>(1, n / g), comm::DataType::f32, comm::ReduceOp::sum);
      break;
    case Collective::kAllGather: group.allgather(a.data(), b.data(), std::max<size_t>(1, n / g), comm::DataType::f32); break;
    case Collective::kP2P:
      if (group.rank() == 0) {
        group.send(a.data(), n, comm::DataType::f32, 1);
        group.recv(b.data(), n, comm::DataType::f32, 1);
      } else {
        group.recv(b.data(), n, comm::DataType::f32, 0);
        group.send(b.data(), n, comm::DataType::f32, 0);
      }
      break;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c == Collective::kP2P ? s / 2 : s;
}

// This rank's samples of `collectives` on groups of `g` (every rank takes part).
void measure_group(comm::Communicator& world, int g, const std::vector<Collective>& collectives,
                   const MeasureOptions& o, std::vector<CommSample>& out) {
  std::unique_ptr<comm::Communicator> split;
  comm::Communicator* group = &world;
  if (g < world.size()) {
    split = world.split(world.rank() / g, world.rank());
    group = split.get();
  }
  const int64_t largest = *std::max_element(o.bytes.begin(), o.bytes.end());
  std::vector<float> a(static_cast<size_t>(largest) / sizeof(float) + 1, 1.0f), b(a.size(), 0.0f);
  for (Collective c : collectives)
    for (int64_t bytes : o.bytes) {
      if (group->size() < g) {  // the odd rank out of an odd world's pairs: no peer
        out.push_back({c, g, bytes, 0});
        continue;
      }
      for (int i = 0; i < o.warmup; ++i) time_once(*group, c, bytes, a, b);
      std::vector<double> t;
      for (int i = 0; i < o.repeats; ++i) t.push_back(time_once(*group, c, bytes, a, b));
      out.push_back({c, g, bytes, median(std::move(t))});
    }
}

}  // namespace

std::vector<int> group_sizes(int world, const std::vector<int>& groups, const std::string& field) {
  for (int g : groups)
    if (g < 2 || world % g != 0)
      throw InvalidArgument(field + ": expected divisors of the world " + std::to_string(world) + " above 1, found " +
                            std::to_string(g));
  if (!groups.empty()) return groups;
  std::vector<int> out;
  for (int g = 2; g <= world; ++g)
    if (world % g == 0) out.push_back(g);
  return out;
}

CollectiveCost fit(Collective collective, int group, const std::vector<CommSample>& samples) {
  if (samples.empty()) throw InvalidArgument("samples: expected at least one to fit, found none");
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const CommSample& s : samples) {
    if (s.bytes < 0 || !std::isfinite(s.seconds))
      throw InvalidArgument("samples: expected bytes >= 0 and finite seconds, found " + std::to_string(s.bytes) +
                            " bytes, " + std::to_string(s.seconds) + " s");
    const double x = static_cast<double>(s.bytes), y = s.seconds;
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double var = n * sxx - sx * sx;
  double slope = var > 0 ? (n * sxy - sx * sy) / var : 0;
  if (slope <= 0) slope = 0;  // no measurable bandwidth cost: a constant, the mean
  double alpha = (sy - slope * sx) / n;
  if (alpha < 0) {  // through the origin
    alpha = 0;
    slope = sxx > 0 ? sxy / sxx : 0;
  }
  CollectiveCost c;
  c.collective = collective;
  c.group = group;
  c.alpha_s = std::max(0.0, alpha);
  c.beta_bytes_per_s = slope > 0 ? 1.0 / slope : kInf;
  return c;
}

CommTable fit_table(const std::vector<CommSample>& samples) {
  CommTable t;
  std::vector<std::pair<Collective, int>> keys;
  for (const CommSample& s : samples)
    if (std::find(keys.begin(), keys.end(), std::make_pair(s.collective, s.group)) == keys.end())
      keys.emplace_back(s.collective, s.group);
  for (const auto& [c, g] : keys) {
    std::vector<CommSample> of;
    for (const CommSample& s : samples)
      if (s.collective == c && s.group == g) of.push_back(s);
    t.entries.push_back(fit(c, g, of));
  }
  return t;
}

CommTable measure_comm_table(comm::Communicator& world, const MeasureOptions& o, std::vector<CommSample>* samples) {
  check(world, o);
  if (world.size() == 1) {
    if (samples) samples->clear();
    return default_comm_table();
  }
  std::vector<CommSample> mine;
  for (int g : group_sizes(world.size(), o.groups, "measure.groups"))
    measure_group(world, g, {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather}, o, mine);
  measure_group(world, 2, {Collective::kP2P}, o, mine);  // pairs (2 divides world, else none)
  // Every rank measured the same list of (collective, group, bytes); rank 0's seconds win.
  std::vector<double> seconds;
  for (const CommSample& s : mine) seconds.push_back(s.seconds);
  world.broadcast(seconds.data(), seconds.size(), comm::DataType::f64, 0);
  for (size_t i = 0; i < mine.size(); ++i) mine[i].seconds = seconds[i];
  if (samples) *samples = mine;
  return fit_table(mine);
}

CommTable default_comm_table() {
  CommTable t;
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather, Collective::kP2P})
    for (int g : {2, 1024}) t.entries.push_back({c, g, 50e-6, 2e9});
  return t;
}

std::string describe(const CommTable& table) {
  std::ostringstream os;
  char line[160];
  for (const CollectiveCost& e : table.entries) {
    std::snprintf(line, sizeof line, "%-14s g %-4d alpha %8.1f us  beta %8.3f GB/s\n", to_string(e.collective), e.group,
                  e.alpha_s * 1e6, e.beta_bytes_per_s / 1e9);
    os << line;
  }
  return os.str();
}

}  // namespace heft::parallel::layout
