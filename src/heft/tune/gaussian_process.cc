#include "heft/tune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "heft/check.h"

namespace heft::tune {

namespace {

constexpr double kSqrt5 = 2.23606797749979;
// The lengthscales' prior: log l ~ N(log 0.4, 1.5²), a weak pull towards moderately smooth
// functions that keeps a fit on few points from collapsing onto one point per bump.
constexpr double kPriorLogLength = -0.916, kPriorSd = 1.5;

int params_of(int d) { return d + 2; }

Eigen::VectorXd pack(const GpHyper& h) {
  Eigen::VectorXd t(params_of(static_cast<int>(h.log_lengthscale.size())));
  t.head(h.log_lengthscale.size()) = h.log_lengthscale;
  t[t.size() - 2] = h.log_signal;
  t[t.size() - 1] = h.log_noise;
  return t;
}

GpHyper unpack(const Eigen::VectorXd& t) {
  GpHyper h;
  h.log_lengthscale = t.head(t.size() - 2);
  h.log_signal = t[t.size() - 2];
  h.log_noise = t[t.size() - 1];
  return h;
}

void clamp(Eigen::VectorXd& t) {
  const Eigen::Index d = t.size() - 2;
  for (Eigen::Index i = 0; i < d; ++i)
    t[i] = std::clamp(t[i], GaussianProcess::kMinLogLength, GaussianProcess::kMaxLogLength);
  t[d] = std::clamp(t[d], GaussianProcess::kMinLogSignal, GaussianProcess::kMaxLogSignal);
  t[d + 1] = std::clamp(t[d + 1], GaussianProcess::kMinLogNoise, GaussianProcess::kMaxLogNoise);
}

double normal_pdf(double z) { return std::exp(-0.5 * z * z) / std::sqrt(2 * M_PI); }
double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

}  // namespace

double expected_improvement(double mean, double variance, double best, double xi) {
  const double gap = best - xi - mean;
  if (!(variance > 1e-18)) return std::max(gap, 0.0);
  const double sd = std::sqrt(variance), z = gap / sd;
  return gap * normal_cdf(z) + sd * normal_pdf(z);
}

double GaussianProcess::kernel(const Eigen::VectorXd& a, const Eigen::VectorXd& b,
                               const GpHyper& h) const {
  const double r = std::sqrt(((a - b).array() / h.log_lengthscale.array().exp()).square().sum());
  return std::exp(h.log_signal) * (1 + kSqrt5 * r + 5.0 / 3.0 * r * r) * std::exp(-kSqrt5 * r);
}

void GaussianProcess::set_data(Eigen::MatrixXd x, const Eigen::VectorXd& y) {
  HEFT_CHECK(x.rows() == y.size() && x.rows() >= 1, "GaussianProcess: ", x.rows(), " points, ",
             y.size(), " targets");
  x_ = std::move(x);
  y_mean_ = y.mean();
  const double var = (y.array() - y_mean_).square().mean();
  y_scale_ = var > 1e-24 ? std::sqrt(var) : 1.0;
  y_ = (y.array() - y_mean_) / y_scale_;
  if (!have_hyper_ || hyper_.log_lengthscale.size() != x_.cols()) {
    hyper_.log_lengthscale = Eigen::VectorXd::Constant(x_.cols(), kPriorLogLength);
    hyper_.log_signal = 0.0;
    hyper_.log_noise = -6.0;
    have_hyper_ = true;
  }
  factor();
}

void GaussianProcess::set_hyper(const GpHyper& h) {
  hyper_ = h;
  have_hyper_ = true;
  if (x_.rows() > 0) factor();
}

void GaussianProcess::factor() {
  const Eigen::Index n = x_.rows();
  Eigen::MatrixXd k(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j)
      k(i, j) = k(j, i) = kernel(x_.row(i), x_.row(j), hyper_);
  k.diagonal().array() += std::exp(hyper_.log_noise) + 1e-10;
  Eigen::LLT<Eigen::MatrixXd> llt(k);
  l_ = llt.matrixL();
  alpha_ = llt.solve(y_);
}

double GaussianProcess::log_marginal_likelihood(const GpHyper& h, Eigen::VectorXd* grad) const {
  const Eigen::Index n = x_.rows(), d = x_.cols();
  const Eigen::VectorXd inv_l2 = (-2.0 * h.log_lengthscale).array().exp();
  const double s2 = std::exp(h.log_signal), noise = std::exp(h.log_noise);
  Eigen::MatrixXd k(n, n), r(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j <= i; ++j) {
      const double rr = std::sqrt(((x_.row(i) - x_.row(j)).array().square() * inv_l2.transpose().array()).sum());
      r(i, j) = r(j, i) = rr;
      k(i, j) = k(j, i) = s2 * (1 + kSqrt5 * rr + 5.0 / 3.0 * rr * rr) * std::exp(-kSqrt5 * rr);
    }
  Eigen::MatrixXd kn = k;
  kn.diagonal().array() += noise + 1e-10;
  Eigen::LLT<Eigen::MatrixXd> llt(kn);
  if (llt.info() != Eigen::Success) return -std::numeric_limits<double>::infinity();
  const Eigen::VectorXd alpha = llt.solve(y_);
  const Eigen::MatrixXd l = llt.matrixL();
  double lml = -0.5 * y_.dot(alpha) - l.diagonal().array().log().sum() - 0.5 * n * std::log(2 * M_PI);
  const Eigen::ArrayXd dev = (h.log_lengthscale.array() - kPriorLogLength) / kPriorSd;
  lml += -0.5 * dev.square().sum();
  if (grad) {
    // W = ααᵀ − K⁻¹; ∂LML/∂θ = ½ Σ_ij W_ij ∂K_ij/∂θ.
    const Eigen::MatrixXd w = alpha * alpha.transpose() - llt.solve(Eigen::MatrixXd::Identity(n, n));
    grad->setZero(params_of(static_cast<int>(d)));
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j) {
        const double rr = r(i, j);
        // ∂k/∂log l_m = s² (5/3)(1 + √5 r) e^{−√5 r} Δ_m² / l_m²
        const double common = s2 * (5.0 / 3.0) * (1 + kSqrt5 * rr) * std::exp(-kSqrt5 * rr);
        for (Eigen::Index m = 0; m < d; ++m) {
          const double delta = x_(i, m) - x_(j, m);
          (*grad)[m] += 0.5 * w(i, j) * common * delta * delta * inv_l2[m];
        }
        (*grad)[d] += 0.5 * w(i, j) * k(i, j);
      }
    (*grad)[d + 1] = 0.5 * noise * w.trace();
    grad->head(d).array() -= dev / kPriorSd;
  }
  return lml;
}

void GaussianProcess::fit(std::mt19937_64& rng, int restarts, int iterations) {
  HEFT_CHECK(x_.rows() >= 1, "GaussianProcess::fit before set_data");
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int p = params_of(dims());
  Eigen::VectorXd best = pack(hyper_);
  double best_lml = log_marginal_likelihood(hyper_);
  for (int start = 0; start < restarts; ++start) {
    Eigen::VectorXd t = pack(hyper_);
    if (start > 0) {
      for (int i = 0; i < p - 2; ++i) t[i] = std::log(0.05) + unit(rng) * (std::log(2.0) - std::log(0.05));
      t[p - 2] = -1.0 + 2.0 * unit(rng);
      t[p - 1] = -10.0 + 6.0 * unit(rng);
    }
    // Adam on θ (ascent): robust to the gradient's scale, a few hundred cheap steps.
    Eigen::VectorXd m = Eigen::VectorXd::Zero(p), v = Eigen::VectorXd::Zero(p), g(p);
    const double rate = 0.1, b1 = 0.9, b2 = 0.999;
    for (int it = 1; it <= iterations; ++it) {
      const double lml = log_marginal_likelihood(unpack(t), &g);
      if (!std::isfinite(lml)) break;
      if (lml > best_lml) {
        best_lml = lml;
        best = t;
      }
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g.cwiseProduct(g);
      const Eigen::VectorXd mh = m / (1 - std::pow(b1, it)), vh = v / (1 - std::pow(b2, it));
      t += rate * mh.cwiseQuotient((vh.array().sqrt() + 1e-8).matrix());
      clamp(t);
    }
    const double lml = log_marginal_likelihood(unpack(t));
    if (lml > best_lml) {
      best_lml = lml;
      best = t;
    }
  }
  hyper_ = unpack(best);
  factor();
}

void GaussianProcess::predict(const Eigen::VectorXd& x, double* mean, double* variance) const {
  const Eigen::Index n = x_.rows();
  Eigen::VectorXd ks(n);
  for (Eigen::Index i = 0; i < n; ++i) ks[i] = kernel(x_.row(i), x, hyper_);
  const double m = ks.dot(alpha_);
  const Eigen::VectorXd v = l_.triangularView<Eigen::Lower>().solve(ks);
  const double var = std::max(0.0, std::exp(hyper_.log_signal) - v.squaredNorm());
  *mean = y_mean_ + y_scale_ * m;
  *variance = var * y_scale_ * y_scale_;
}

}  // namespace heft::tune
