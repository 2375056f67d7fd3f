// The Gaussian process and expected improvement (src/heft/tune/gaussian_process.h): the
// posterior matches the closed form on one point, the likelihood's gradient matches finite
// differences, fitting raises the likelihood, EI is zero where the model is certain and not
// better, and the Bayesian search beats random search on a smooth function.
#include "heft/tune/gaussian_process.h"

#include <gtest/gtest.h>

#include <cmath>

#include "heft/tune/bayesian_search.h"
#include "heft/tune/random_search.h"

namespace heft::tune {
namespace {

GpHyper hyper(int d, double length, double log_signal, double log_noise) {
  GpHyper h;
  h.log_lengthscale = Eigen::VectorXd::Constant(d, std::log(length));
  h.log_signal = log_signal;
  h.log_noise = log_noise;
  return h;
}

TEST(GaussianProcess, PosteriorMatchesTheClosedFormOnTwoPoints) {
  // Two points, targets -1 and +1 (already standardised: mean 0, sd 1), signal s^2 = 1,
  // noise σ^2 = 0.01, lengthscale 0.5. At x = 0.25 (r = 0.5 to each point):
  // k* = (1 + √5/2 + 5/12) e^{-√5/2} to both; K = [[1+σ², k01], [k01, 1+σ²]].
  GaussianProcess gp;
  Eigen::MatrixXd x(2, 1);
  x << 0.0, 0.5;
  Eigen::VectorXd y(2);
  y << -1.0, 1.0;
  gp.set_data(x, y);
  gp.set_hyper(hyper(1, 0.5, 0.0, std::log(0.01)));
  auto matern = [](double r) {
    const double s5 = std::sqrt(5.0);
    return (1 + s5 * r + 5.0 / 3.0 * r * r) * std::exp(-s5 * r);
  };
  const double k01 = matern(1.0), ks = matern(0.5), a = 1 + 0.01 + 1e-10;
  // K^{-1} for [[a, b], [b, a]] is [[a, -b], [-b, a]] / (a² - b²).
  const double det = a * a - k01 * k01;
  const double want_mean = ks * ((a * -1 - k01 * 1) + (-k01 * -1 + a * 1)) / det;  // = 0 here
  const double kinvk = ks * ks * (2 * a - 2 * k01) / det;
  double mean, var;
  Eigen::VectorXd at(1);
  at << 0.25;
  gp.predict(at, &mean, &var);
  EXPECT_NEAR(mean, want_mean, 1e-9);
  EXPECT_NEAR(var, 1.0 - kinvk, 1e-9);
  at << 0.5;  // on a point: k* = (k01, 1), so the mean is (1 - k01) / (a - k01), near 1
  gp.predict(at, &mean, &var);
  EXPECT_NEAR(mean, (1 - k01) / (a - k01), 1e-9);
  EXPECT_LT(var, 0.011);  // about the noise
}

TEST(GaussianProcess, LikelihoodGradientMatchesFiniteDifferences) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(0, 1);
  Eigen::MatrixXd x(12, 3);
  Eigen::VectorXd y(12);
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 3; ++j) x(i, j) = unit(rng);
    y[i] = std::sin(6 * x(i, 0)) + x(i, 1) * x(i, 1) - 0.5 * x(i, 2);
  }
  GaussianProcess gp;
  gp.set_data(x, y);
  GpHyper h = hyper(3, 0.3, 0.2, -4.0);
  h.log_lengthscale[1] = std::log(0.7);
  Eigen::VectorXd grad;
  gp.log_marginal_likelihood(h, &grad);
  const double eps = 1e-6;
  double worst = 0;
  for (int p = 0; p < 5; ++p) {
    GpHyper up = h, down = h;
    auto bump = [&](GpHyper& g, double by) {
      if (p < 3) g.log_lengthscale[p] += by;
      else if (p == 3) g.log_signal += by;
      else g.log_noise += by;
    };
    bump(up, eps);
    bump(down, -eps);
    const double fd = (gp.log_marginal_likelihood(up) - gp.log_marginal_likelihood(down)) / (2 * eps);
    worst = std::max(worst, std::abs(fd - grad[p]) / std::max(1.0, std::abs(fd)));
  }
  EXPECT_LT(worst, 1e-4) << "largest relative difference " << worst;
  // Fitting raises the likelihood above the starting θ.
  gp.set_hyper(h);
  const double before = gp.log_marginal_likelihood(h);
  gp.fit(rng);
  EXPECT_GT(gp.log_marginal_likelihood(gp.hyper()), before);
}

TEST(ExpectedImprovement, IsZeroWhereTheModelIsCertainAndNotBetter) {
  EXPECT_EQ(expected_improvement(1.0, 0.0, 0.5), 0.0);
  EXPECT_EQ(expected_improvement(0.5, 0.0, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(expected_improvement(0.2, 0.0, 0.5), 0.3);  // certain and better: the gap
  EXPECT_GT(expected_improvement(1.0, 1.0, 0.5), 0.0);         // uncertain: some chance
  // Closed form at mean = best: sd * φ(0) = sd / √(2π).
  EXPECT_NEAR(expected_improvement(0.5, 4.0, 0.5), 2.0 / std::sqrt(2 * M_PI), 1e-12);
}

TEST(BayesianSearch, FindsTheMinimumOfASmoothFunctionBetterThanRandom) {
  SearchSpace s;
  s.add_continuous("x", -3, 3, Scaling::kLinear);
  s.add_continuous("y", -3, 3, Scaling::kLinear);
  auto f = [](const Config& c) {
    const double x = std::get<double>(c.at("x")), y = std::get<double>(c.at("y"));
    return (x - 1.2) * (x - 1.2) + 2 * (y + 0.7) * (y + 0.7);
  };
  double bayes_worst = 0, random_median = 0;
  std::vector<double> random_best;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    BayesianSearch b(s, seed);
    RandomSearch r(s, seed);
    double bb = 1e9, rb = 1e9;
    for (int i = 0; i < 20; ++i) {
      const Config c = *b.suggest();
      const double v = f(c);
      b.observe(c, v);
      bb = std::min(bb, v);
      rb = std::min(rb, f(*r.suggest()));
    }
    EXPECT_EQ(b.observations(), 20);
    EXPECT_EQ(b.pending(), 0);
    bayes_worst = std::max(bayes_worst, bb);
    random_best.push_back(rb);
  }
  std::sort(random_best.begin(), random_best.end());
  random_median = random_best[2];
  // Every Bayesian run ends within 0.05 of the minimum (0), below a fifth of random's median.
  EXPECT_LT(bayes_worst, 0.05) << "random search's median best " << random_median;
  EXPECT_LT(bayes_worst, random_median / 5);
}

TEST(BayesianSearch, ParallelSuggestionsAreDistinctAndWarmStartIsUsed) {
  SearchSpace s;
  s.add_continuous("x", 0, 1, Scaling::kLinear);
  BayesianSearch b(s, 1, BayesianOptions{2, 500, 3, 2, 0.01});
  // Warm start: three earlier trials; the design is skipped once initial_points are known.
  b.observe({{"x", 0.1}}, 3.0);
  b.observe({{"x", 0.5}}, 1.0);
  b.observe({{"x", 0.9}}, 2.0);
  EXPECT_EQ(b.observations(), 3);
  std::vector<double> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(std::get<double>(b.suggest()->at("x")));
  EXPECT_EQ(b.pending(), 4);
  for (size_t i = 0; i < xs.size(); ++i)
    for (size_t j = 0; j < i; ++j) EXPECT_GT(std::abs(xs[i] - xs[j]), 1e-6) << i << " and " << j;
  // The first model-based suggestion goes near the best warm-start point.
  EXPECT_NEAR(xs[0], 0.5, 0.3);
  b.forget({{"x", xs[3]}});
  EXPECT_EQ(b.pending(), 3);
}

}  // namespace
}  // namespace heft::tune
