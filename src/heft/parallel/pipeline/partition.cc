#include "heft/parallel/pipeline/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "heft/error.h"

namespace heft::parallel::pipeline {

namespace {

struct Prefix {
  std::vector<double> time;
  std::vector<int64_t> memory;
  double total_time = 0;
  double total_memory = 0;
};

Prefix prefix_of(const std::vector<LayerCost>& layers) {
  Prefix p;
  p.time.assign(layers.size() + 1, 0);
  p.memory.assign(layers.size() + 1, 0);
  for (size_t i = 0; i < layers.size(); ++i) {
    p.time[i + 1] = p.time[i] + layers[i].forward_s + layers[i].backward_s;
    p.memory[i + 1] = p.memory[i] + layers[i].param_bytes + layers[i].activation_bytes;
  }
  p.total_time = std::max(p.time.back(), 1e-30);
  p.total_memory = std::max<double>(static_cast<double>(p.memory.back()), 1e-30);
  return p;
}

// Cost of layers [a, b).
double cost(const Prefix& p, size_t a, size_t b, double w) {
  return (1 - w) * (p.time[b] - p.time[a]) / p.total_time +
         w * static_cast<double>(p.memory[b] - p.memory[a]) / p.total_memory;
}

Plan finish(const std::vector<LayerCost>& layers, std::vector<int> first, double w) {
  const Prefix p = prefix_of(layers);
  Plan plan;
  plan.first = std::move(first);
  for (size_t s = 0; s < plan.first.size(); ++s) {
    const size_t a = static_cast<size_t>(plan.first[s]);
    const size_t b = s + 1 < plan.first.size() ? static_cast<size_t>(plan.first[s + 1]) : layers.size();
    plan.cost.push_back(cost(p, a, b, w));
    plan.time_s.push_back(p.time[b] - p.time[a]);
    plan.memory.push_back(p.memory[b] - p.memory[a]);
    plan.max_cost = std::max(plan.max_cost, plan.cost.back());
    if (b < layers.size()) plan.cut_bytes += layers[b - 1].activation_bytes;
  }
  return plan;
}

void check_weight(double w) {
  if (!(w >= 0 && w <= 1))
    throw InvalidArgument("memory_weight: expected a number from 0 to 1, found " + std::to_string(w));
}

}  // namespace

Plan auto_partition(const std::vector<LayerCost>& layers, int stages, double w, double tolerance) {
  check_weight(w);
  if (!(tolerance >= 0 && std::isfinite(tolerance)))
    throw InvalidArgument("partition tolerance: expected a number >= 0, found " + std::to_string(tolerance));
  const int n = static_cast<int>(layers.size());
  if (stages < 1 || stages > n)
    throw InvalidArgument("partitions: expected 1 to the model's " + std::to_string(n) +
                          " layers, found " + std::to_string(stages));
  const Prefix p = prefix_of(layers);
  const double inf = std::numeric_limits<double>::infinity();
  // best[k][j]: the smallest largest cost of layers [0, j) in k stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i)
        best[k][j] = std::min(best[k][j], std::max(best[k - 1][i], cost(p, i, j, w)));
  const double target = best[stages][n] * (1 + tolerance) * (1 + 1e-12) + 1e-15;
  // Among splits whose every stage costs at most target, the smallest (cut bytes, sum of
  // squared stage sizes); the last i found on a tie (<=): the latest start of each stage
  // from the last one back, a fixed order.
  using Score = std::pair<int64_t, int64_t>;
  const Score none{std::numeric_limits<int64_t>::max(), 0};
  std::vector<std::vector<Score>> score(stages + 1, std::vector<Score>(n + 1, none));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, -1));
  score[0][0] = {0, 0};
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n; ++j)
      for (int i = k - 1; i < j; ++i) {
        if (score[k - 1][i] == none || cost(p, i, j, w) > target) continue;
        const Score c{score[k - 1][i].first + (j < n ? layers[j - 1].activation_bytes : 0),
                      score[k - 1][i].second + static_cast<int64_t>(j - i) * (j - i)};
        if (c <= score[k][j]) {
          score[k][j] = c;
          from[k][j] = i;
        }
      }
  std::vector<int> first(stages);
  for (int k = stages, j = n; k >= 1; --k) {
    first[k - 1] = from[k][j];
    j = from[k][j];
  }
  return finish(layers, first, w);
}

Plan manual_partition(const std::vector<LayerCost>& layers, const std::vector<int>& boundaries,
                      double w) {
  check_weight(w);
  std::vector<int> first{0};
  for (int b : boundaries) {
    if (b <= first.back() || b >= static_cast<int>(layers.size()))
      throw InvalidArgument("partition_boundaries: expected ascending layer indices from 1 to " +
                            std::to_string(layers.size() - 1) + ", found " + std::to_string(b));
    first.push_back(b);
  }
  return finish(layers, first, w);
}

std::string describe(const Plan& plan, const std::vector<LayerCost>& layers) {
  std::ostringstream os;
  bool profiled = false;  // a manual split runs no profile: its table shows layers only
  for (const LayerCost& l : layers) profiled = profiled || l.param_bytes > 0 || l.activation_bytes > 0;
  if (!profiled) {
    os << "pipeline plan: " << plan.first.size() << " stages, a manual split (not profiled)\n";
    os << "stage  layers\n";
    for (size_t s = 0; s < plan.first.size(); ++s) {
      const int a = plan.first[s], b = plan.last_layer(static_cast<int>(s), static_cast<int>(layers.size()));
      os << s << std::string(s < 10 ? 6 : 5, ' ') << layers[a].name
         << (a == b ? "" : " .. " + layers[b].name) << " (" << b - a + 1 << " layers)\n";
    }
    return os.str();
  }
  os << "pipeline plan: " << plan.first.size() << " stages, largest cost " << plan.max_cost
     << ", " << plan.cut_bytes << " activation bytes cross the cuts\n";
  os << "stage  layers                          time_ms   memory_MB  cost\n";
  for (size_t s = 0; s < plan.first.size(); ++s) {
    const int a = plan.first[s], b = plan.last_layer(static_cast<int>(s), static_cast<int>(layers.size()));
    const std::string range = layers[a].name + (a == b ? "" : " .. " + layers[b].name);
    char line[200];
    std::snprintf(line, sizeof(line), "%-6zu %-30s %9.2f %10.2f  %.3f\n", s, range.c_str(),
                  plan.time_s[s] * 1e3, static_cast<double>(plan.memory[s]) / (1 << 20), plan.cost[s]);
    os << line;
  }
  return os.str();
}

std::string describe_measured(const Plan& plan, const std::vector<LayerCost>& layers, int stages,
                              const std::vector<double>& measured_s, const std::string& measured) {
  if (stages < 1 || static_cast<int>(measured_s.size()) != stages ||
      plan.first.size() % static_cast<size_t>(stages) != 0)
    throw InvalidArgument("describe_measured: expected one measured time per stage (" +
                          std::to_string(stages) + "), found " + std::to_string(measured_s.size()));
  std::ostringstream os;
  os << "pipeline stages, predicted (profile) against measured (" << measured
     << "), forward + backward ms per micro-batch:\n";
  os << "stage  layers                          predicted_ms  measured_ms  measured/predicted\n";
  const int n = static_cast<int>(layers.size());
  for (int s = 0; s < stages; ++s) {
    std::string range;
    double predicted = 0;
    for (size_t vs = static_cast<size_t>(s); vs < plan.first.size(); vs += static_cast<size_t>(stages)) {
      const int a = plan.first[vs], b = plan.last_layer(static_cast<int>(vs), n);
      range += (range.empty() ? "" : ", ") + layers[a].name + (a == b ? "" : " .. " + layers[b].name);
      predicted += plan.time_s.empty() ? 0 : plan.time_s[vs];
    }
    const double m = measured_s[static_cast<size_t>(s)];
    char ratio[32] = "-", line[240];
    if (predicted > 0) std::snprintf(ratio, sizeof(ratio), "%.2f", m / predicted);
    std::snprintf(line, sizeof(line), "%-6d %-30s %13.2f %12.2f %19s\n", s, range.c_str(),
                  predicted * 1e3, m * 1e3, ratio);
    os << line;
  }
  return os.str();
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  return (*std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid)) + upper) / 2;
}

void profile_layers(std::vector<LayerCost>& layers, const ProfileOptions& options,
                    const std::function<void(int, double*, double*)>& time_layer) {
  if (options.warmup < 0)
    throw InvalidArgument("profile warmup: expected at least 0 rounds, found " + std::to_string(options.warmup));
  if (options.repeats < 1)
    throw InvalidArgument("profile repeats: expected at least 1 round, found " + std::to_string(options.repeats));
  const size_t n = layers.size();
  std::vector<std::vector<double>> forward(n), backward(n);
  for (int round = 0; round < options.warmup + options.repeats; ++round)
    for (size_t i = 0; i < n; ++i) {
      double f = 0, b = 0;
      time_layer(static_cast<int>(i), &f, &b);
      if (round < options.warmup) continue;
      forward[i].push_back(f);
      backward[i].push_back(b);
    }
  for (size_t i = 0; i < n; ++i) {
    layers[i].forward_s = median(forward[i]);
    layers[i].backward_s = median(backward[i]);
  }
}

}  // namespace heft::parallel::pipeline
