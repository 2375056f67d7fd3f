// heft's tuner on the standard test functions, through the library API (search_strategy.h), printing
// the lines of ../shared/peers/tune_optuna.py so the two compare trial for trial:
//   function=branin strategy=heft_bayesian seed=3 best@10=.. best@25=.. best@50=..
//   summary function=branin strategy=heft_bayesian regret@10=.. regret@25=.. regret@50=..
// and, per strategy, the optimiser's own time per suggestion at the last budget.
//
//   build/tune_driver [--functions branin,hartmann6] [--strategies random,bayesian,bayesian_parallel4]
//                     [--seeds 20] [--trials 50]
// bayesian_parallelP asks for P suggestions before observing them (P trials in flight).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "heft/tune/search_strategy.h"

using heft::tune::Config;
using heft::tune::SearchSpace;

namespace {

constexpr double kBraninOptimum = 0.397887, kHartmann6Optimum = -3.32237;

double branin(double x1, double x2) {
  const double b = 5.1 / (4 * M_PI * M_PI), c = 5 / M_PI, t = 1 / (8 * M_PI);
  return std::pow(x2 - b * x1 * x1 + c * x1 - 6, 2) + 10 * (1 - t) * std::cos(x1) + 10;
}

double hartmann6(const double* x) {
  static const double a[4][6] = {{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14},
                                 {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}};
  static const double p[4][6] = {{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
                                 {2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}};
  static const double alpha[4] = {1.0, 1.2, 3.0, 3.2};
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    double inner = 0;
    for (int j = 0; j < 6; ++j) inner += a[i][j] * std::pow(x[j] - 1e-4 * p[i][j], 2);
    total += alpha[i] * std::exp(-inner);
  }
  return -total;
}

struct Function {
  SearchSpace space;
  std::function<double(const Config&)> f;
  double optimum;
};

double num(const Config& c, const std::string& k) { return std::get<double>(c.at(k)); }

Function make_function(const std::string& name) {
  Function fn;
  if (name == "branin") {
    fn.space.add_continuous("x1", -5, 10, heft::tune::Scaling::kLinear);
    fn.space.add_continuous("x2", 0, 15, heft::tune::Scaling::kLinear);
    fn.f = [](const Config& c) { return branin(num(c, "x1"), num(c, "x2")); };
    fn.optimum = kBraninOptimum;
  } else if (name == "hartmann6") {
    for (int j = 0; j < 6; ++j) fn.space.add_continuous("x" + std::to_string(j), 0, 1, heft::tune::Scaling::kLinear);
    fn.f = [](const Config& c) {
      double x[6];
      for (int j = 0; j < 6; ++j) x[j] = num(c, "x" + std::to_string(j));
      return hartmann6(x);
    };
    fn.optimum = kHartmann6Optimum;
  } else {
    std::fprintf(stderr, "tune_driver: unknown function %s (branin, hartmann6)\n", name.c_str());
    std::exit(2);
  }
  return fn;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The time suggest() took over the last round of each seed's trials.
struct SuggestTime {
  double seconds = 0;
  int count = 0;
};

// One seed's run: `trials` objective values in the order observed, `parallel` suggestions
// asked for before their values are observed.
std::vector<double> run_seed(const Function& fn, const std::string& strategy_name, int parallel,
                             int trials, int seed, SuggestTime& last) {
  auto strategy = heft::tune::make_search_strategy(strategy_name, fn.space, static_cast<uint64_t>(seed));
  std::vector<double> values;
  while (static_cast<int>(values.size()) < trials) {
    const int batch = std::min(parallel, trials - static_cast<int>(values.size()));
    std::vector<Config> configs;
    for (int b = 0; b < batch; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      configs.push_back(*strategy->suggest());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (static_cast<int>(values.size()) + b >= trials - parallel) {
        last.seconds += s;
        ++last.count;
      }
    }
    for (const Config& c : configs) {
      const double v = fn.f(c);
      values.push_back(v);
      strategy->observe(c, v);
    }
  }
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  std::string functions = "branin,hartmann6", strategies = "random,bayesian,bayesian_parallel4";
  int seeds = 20, trials = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--functions") functions = v;
    else if (k == "--strategies") strategies = v;
    else if (k == "--seeds") seeds = std::stoi(v);
    else if (k == "--trials") trials = std::stoi(v);
    else {
      std::fprintf(stderr, "usage: tune_driver [--functions F,..] [--strategies S,..] [--seeds N] [--trials N]\n");
      return 2;
    }
  }
  std::vector<int> budgets;
  for (int k : {10, 25, 50, 100})
    if (k <= trials) budgets.push_back(k);
  for (const std::string& fname : split(functions)) {
    const Function fn = make_function(fname);
    for (const std::string& sname : split(strategies)) {
      int parallel = 1;
      std::string base = sname;
      if (const auto pos = sname.find("_parallel"); pos != std::string::npos) {
        parallel = std::stoi(sname.substr(pos + 9));
        base = sname.substr(0, pos);
      }
      std::map<int, std::vector<double>> bests;
      SuggestTime last;
      for (int seed = 0; seed < seeds; ++seed) {
        const std::vector<double> values = run_seed(fn, base, parallel, trials, seed, last);
        std::printf("function=%s strategy=heft_%s seed=%d", fname.c_str(), sname.c_str(), seed);
        for (int k : budgets) {
          const double b = *std::min_element(values.begin(), values.begin() + k);
          bests[k].push_back(b);
          std::printf(" best@%d=%.6g", k, b);
        }
        std::printf("\n");
        std::fflush(stdout);
      }
      std::printf("summary function=%s strategy=heft_%s", fname.c_str(), sname.c_str());
      for (int k : budgets) std::printf(" regret@%d=%.6g", k, median(bests[k]) - fn.optimum);
      std::printf(" suggest_ms@%d=%.2f\n", trials, 1e3 * last.seconds / std::max(1, last.count));
      std::fflush(stdout);
    }
  }
  return 0;
}
