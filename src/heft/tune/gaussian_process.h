// A Gaussian process regressor on the unit cube for the Bayesian strategy: zero mean (on
// standardised targets), a Matérn 5/2 kernel with one lengthscale per coordinate (ARD),
// a signal variance and a noise variance.
//
// Terms. Hyperparameters θ = (log l_1..l_d, log s², log σ²), each kept inside bounds;
// k(x, x') = s² (1 + √5 r + 5r²/3) exp(−√5 r), r² = Σ_i (x_i − x'_i)² / l_i²;
// K = k(X, X) + σ² I = L Lᵀ (Cholesky), α = K⁻¹ y. fit() maximises the log marginal
// likelihood log p(y | X, θ) = −½ yᵀα − Σ log L_ii − (n/2) log 2π, plus a weak log-normal
// prior on the lengthscales, by gradient ascent (Adam on θ, analytic gradient
// ½ tr((ααᵀ − K⁻¹) ∂K/∂θ)) from several starts, keeping the best.
//
// Deliberately left out: other kernels, input warping, sparse approximations (n stays in
// the hundreds for tuning jobs).
#pragma once

#include <Eigen/Dense>
#include <random>
#include <vector>

namespace heft::tune {

struct GpHyper {
  Eigen::VectorXd log_lengthscale;  // (d)
  double log_signal = 0.0;          // log s²
  double log_noise = -6.0;          // log σ²
};

class GaussianProcess {
 public:
  // Bounds of the hyperparameters (natural-log units) on standardised targets.
  static constexpr double kMinLogLength = -4.6, kMaxLogLength = 2.3;  // 0.01 .. 10
  static constexpr double kMinLogSignal = -3.0, kMaxLogSignal = 3.0;
  static constexpr double kMinLogNoise = -13.8, kMaxLogNoise = -1.0;  // 1e-6 .. 0.37

  // Sets the data: X (n x d) points, y (n) targets (standardised inside: predictions come
  // back in y's units). n >= 1.
  void set_data(Eigen::MatrixXd x, const Eigen::VectorXd& y);
  // Fits θ by maximising the penalised log marginal likelihood from `restarts` starts (the
  // previous θ, if any, and random ones). Needs set_data first.
  void fit(std::mt19937_64& rng, int restarts = 4, int iterations = 120);
  // Uses θ as given (tests; warm starts of a fit).
  void set_hyper(const GpHyper& h);
  const GpHyper& hyper() const { return hyper_; }

  // The posterior at x (d): mean and variance of f(x) (without the noise), in y's units.
  void predict(const Eigen::VectorXd& x, double* mean, double* variance) const;
  // log p(y | X, θ) of the standardised targets and its gradient in θ (for tests).
  double log_marginal_likelihood(const GpHyper& h, Eigen::VectorXd* gradient = nullptr) const;

  int size() const { return static_cast<int>(x_.rows()); }
  int dims() const { return static_cast<int>(x_.cols()); }

 private:
  double kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b, const GpHyper& h) const;
  void factor();  // L_, alpha_ from hyper_

  Eigen::MatrixXd x_;
  Eigen::VectorXd y_;  // standardised
  double y_mean_ = 0.0, y_scale_ = 1.0;
  GpHyper hyper_;
  bool have_hyper_ = false;
  Eigen::MatrixXd l_;  // Cholesky factor of K
  Eigen::VectorXd alpha_;
};

// Expected improvement below `best` of a Gaussian with this mean and variance (minimising):
// E[max(best − xi − f, 0)]; 0 where the variance is 0 and the mean is not below best − xi.
double expected_improvement(double mean, double variance, double best, double xi = 0.0);

}  // namespace heft::tune
