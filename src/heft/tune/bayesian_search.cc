#include "heft/tune/bayesian_search.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "heft/tune/random_search.h"

namespace heft::tune {

namespace {

double distance2(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return s;
}

Eigen::VectorXd vec(const std::vector<double>& u) {
  return Eigen::Map<const Eigen::VectorXd>(u.data(), static_cast<Eigen::Index>(u.size()));
}

}  // namespace

BayesianSearch::BayesianSearch(SearchSpace space, uint64_t seed, BayesianOptions options)
    : space_(std::move(space)), options_(options), rng_(seed) {
  if (options_.initial_points <= 0) options_.initial_points = std::max(4, space_.active_dims() + 1);
  // A Latin hypercube over the numeric coordinates: each of n strata of every coordinate
  // holds one point (a categorical: each value in turn).
  const int n = options_.initial_points;
  std::vector<std::vector<int>> strata;
  for (int d = 0; d < space_.dims(); ++d) {
    std::vector<int> s(static_cast<size_t>(n));
    std::iota(s.begin(), s.end(), 0);
    std::shuffle(s.begin(), s.end(), rng_);
    strata.push_back(std::move(s));
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    std::vector<double> u(static_cast<size_t>(space_.dims()), 0.0);
    size_t k = 0;
    for (const Range& r : space_.ranges()) {
      if (r.kind == Range::Kind::kCategorical) {
        // Stratified too: point i takes value (its stratum mod the value count), so the
        // design covers every value before any repeats.
        u[k + static_cast<size_t>(strata[k][static_cast<size_t>(i)]) % r.values.size()] = 1.0;
        k += r.values.size();
        continue;
      }
      u[k] = (strata[k][static_cast<size_t>(i)] + unit(rng_)) / n;
      ++k;
    }
    design_.push_back(space_.snap(u));
  }
  std::reverse(design_.begin(), design_.end());  // suggested from the back
}

bool BayesianSearch::taken(const std::vector<double>& u) const {
  for (const auto& x : x_)
    if (distance2(x, u) < 1e-18) return true;
  for (const auto& x : pending_)
    if (distance2(x, u) < 1e-18) return true;
  for (const auto& x : failed_)
    if (distance2(x, u) < 1e-18) return true;
  return false;
}

double BayesianSearch::failure_value() const {
  if (y_.empty()) return 1.0;
  const auto [lo, hi] = std::minmax_element(y_.begin(), y_.end());
  const double spread = *hi - *lo;
  return *hi + (spread > 0 ? 0.5 * spread : 1.0);
}

double BayesianSearch::acquisition(const GaussianProcess& gp, const std::vector<double>& u,
                                   double best, double xi) const {
  double mean, var;
  gp.predict(vec(u), &mean, &var);
  return expected_improvement(mean, var, best, xi);
}

double BayesianSearch::fit_model(double best) {
  const double failed = failure_value();
  const size_t n = x_.size() + failed_.size() + pending_.size(), d = static_cast<size_t>(space_.dims());
  Eigen::MatrixXd x(static_cast<Eigen::Index>(n), static_cast<Eigen::Index>(d));
  Eigen::VectorXd y(static_cast<Eigen::Index>(n));
  for (size_t i = 0; i < x_.size(); ++i) {
    x.row(static_cast<Eigen::Index>(i)) = vec(x_[i]);
    y[static_cast<Eigen::Index>(i)] = y_[i];
  }
  for (size_t i = 0; i < failed_.size(); ++i) {
    x.row(static_cast<Eigen::Index>(x_.size() + i)) = vec(failed_[i]);
    y[static_cast<Eigen::Index>(x_.size() + i)] = failed;
  }
  const size_t first_pending = x_.size() + failed_.size();
  for (size_t i = 0; i < pending_.size(); ++i) {
    x.row(static_cast<Eigen::Index>(first_pending + i)) = vec(pending_[i]);
    y[static_cast<Eigen::Index>(first_pending + i)] = best;
  }
  gp_.set_data(x, y);
  gp_.fit(rng_, options_.restarts);
  const double sd = std::sqrt(std::max(1e-24, (y.array() - y.mean()).square().mean()));
  return options_.xi * sd;
}

BayesianSearch::Scored BayesianSearch::candidates(double best, double xi,
                                                  std::normal_distribution<double>& step) {
  std::vector<size_t> order(x_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y_[a] < y_[b]; });
  Scored scored;
  scored.reserve(static_cast<size_t>(options_.candidates));
  for (int c = 0; c < options_.candidates; ++c) {
    std::vector<double> u;
    if (c % 4 == 3 && !order.empty()) {
      u = x_[order[static_cast<size_t>(c / 4) % std::min<size_t>(order.size(), 5)]];
      const double scale = c % 8 == 3 ? 0.02 : 0.1;
      for (double& v : u) v = std::clamp(v + scale * step(rng_), 0.0, 1.0);
    } else {
      u = uniform_point(space_, rng_);
    }
    u = space_.snap(u);
    scored.emplace_back(acquisition(gp_, u, best, xi), std::move(u));
  }
  std::sort(scored.begin(), scored.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return scored;
}

void BayesianSearch::refine(Scored& scored, double best, double xi,
                            std::normal_distribution<double>& step) {
  const int refine = std::min<int>(options_.refine, static_cast<int>(scored.size()));
  for (int i = 0; i < refine; ++i) {
    auto& [score, u] = scored[static_cast<size_t>(i)];
    double scale = 0.05;
    for (int it = 0; it < 60 && scale > 1e-4; ++it) {
      std::vector<double> t = u;
      for (double& v : t) v = std::clamp(v + scale * step(rng_), 0.0, 1.0);
      t = space_.snap(t);
      const double s = acquisition(gp_, t, best, xi);
      if (s > score) {
        score = s;
        u = std::move(t);
      } else if (it % 6 == 5) {
        scale *= 0.5;
      }
    }
  }
  std::sort(scored.begin(), scored.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
}

std::vector<double> BayesianSearch::acquire() {
  const double best = *std::min_element(y_.begin(), y_.end());
  const double xi = fit_model(best);
  // One Gaussian stream for the perturbations and the refinement, in this order.
  std::normal_distribution<double> step(0.0, 1.0);
  Scored scored = candidates(best, xi, step);
  refine(scored, best, xi, step);
  for (const auto& [score, u] : scored)
    if (!taken(u)) return u;
  return space_.snap(uniform_point(space_, rng_));  // every candidate taken: anything new
}

std::optional<Config> BayesianSearch::suggest() {
  std::vector<double> u;
  while (!design_.empty() && static_cast<int>(x_.size() + failed_.size()) < options_.initial_points) {
    u = std::move(design_.back());
    design_.pop_back();
    if (!taken(u)) break;
    u.clear();
  }
  if (u.empty()) u = y_.empty() ? away_from_failures() : acquire();
  pending_.push_back(u);
  return space_.from_unit(u);
}

void BayesianSearch::observe(const Config& config, double objective) {
  const std::vector<double> u = space_.to_unit(config);
  forget(config);
  if (!std::isfinite(objective)) return;
  x_.push_back(u);
  y_.push_back(objective);
}

std::vector<double> BayesianSearch::away_from_failures() {
  // Nothing observed yet: the model has nothing to learn from, so a random point, the
  // farthest of a few from the failures (any when there are none).
  std::vector<double> chosen;
  double farthest = -1;
  for (int i = 0; i < (failed_.empty() ? 1 : 64); ++i) {
    std::vector<double> u = space_.snap(uniform_point(space_, rng_));
    double nearest = 1e300;
    for (const auto& f : failed_) nearest = std::min(nearest, distance2(f, u));
    if (nearest > farthest && !taken(u)) {
      farthest = nearest;
      chosen = std::move(u);
    }
  }
  return chosen.empty() ? space_.snap(uniform_point(space_, rng_)) : chosen;
}

void BayesianSearch::observe_failure(const Config& config) {
  const std::vector<double> u = space_.to_unit(config);
  forget(config);
  failed_.push_back(u);
}

void BayesianSearch::forget(const Config& config) {
  const std::vector<double> u = space_.to_unit(config);
  for (auto it = pending_.begin(); it != pending_.end(); ++it)
    if (distance2(*it, u) < 1e-18) {
      pending_.erase(it);
      return;
    }
}

}  // namespace heft::tune
