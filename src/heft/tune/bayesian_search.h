// Bayesian search: a Gaussian process (gaussian_process.h) on the unit cube of the scaled
// ranges models the objective; each suggestion maximises expected improvement.
//
// Terms. *Observations*: configurations with their objective (warm-start trials included).
// *Pending*: suggestions not yet observed; while trials run in parallel, each pending point
// enters the model with a *constant liar* value (the best objective so far), so the next
// suggestion looks elsewhere instead of repeating it. The first `initial_points` suggestions
// (fewer when warm-start observations exist) are a Latin hypercube over the cube (each
// categorical value in turn).
// *Failures*: configurations whose trials diverged (observe_failure). Each enters the model
// at a *failure value* worse than every observation (the worst plus half the observed
// spread), so the model's mean is bad around it and expected improvement leads away;
// neither they nor points near them count as the best.
// Acquisition: EI over `candidates` random points plus perturbations of the best observed
// ones, the best few refined by a shrinking local search; integers and categoricals are
// snapped (rounded, one-hot) before EI is computed, and a point already observed or pending
// is never suggested again when another is available.
//
// Deliberately left out: multi-objective, constraints, other acquisition functions.
#pragma once

#include <random>
#include <utility>
#include <vector>

#include "heft/tune/gaussian_process.h"
#include "heft/tune/search_strategy.h"

namespace heft::tune {

struct BayesianOptions {
  int initial_points = 0;   // 0: max(4, active dims + 1) (SearchSpace::active_dims)
  int candidates = 2000;    // random candidates per suggestion
  int refine = 5;           // best candidates refined locally
  int restarts = 4;         // starts of the GP's hyperparameter fit
  double xi = 0.01;         // EI's exploration margin, in standard deviations of the data
};

class BayesianSearch : public SearchStrategy {
 public:
  BayesianSearch(SearchSpace space, uint64_t seed, BayesianOptions options = {});
  std::optional<Config> suggest() override;
  void observe(const Config& config, double objective) override;
  void forget(const Config& config) override;
  void observe_failure(const Config& config) override;
  std::string name() const override { return "bayesian"; }

  int observations() const { return static_cast<int>(y_.size()); }
  int failures() const { return static_cast<int>(failed_.size()); }
  // Worse than every observation: the worst plus half the spread (1 when they are equal).
  double failure_value() const;
  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  // Candidate points with their expected improvement, best first.
  using Scored = std::vector<std::pair<double, std::vector<double>>>;
  // The next point to try once something is observed, in three steps: fit_model, candidates,
  // refine; then the best candidate not taken.
  std::vector<double> acquire();
  // Fits the model to the observations, each failure at the failure value and each pending
  // point at `best` (the best value so far). Returns EI's margin: options_.xi standard
  // deviations of the model's data.
  double fit_model(double best);
  // options_.candidates points scored by EI: uniform points and, every fourth, a Gaussian
  // `step` from one of the five best observations. `step` is shared with refine(), so the
  // draws follow one stream.
  Scored candidates(double best, double xi, std::normal_distribution<double>& step);
  // The best options_.refine candidates improved by Gaussian steps that shrink when they stop
  // improving; `scored` re-sorted, best first.
  void refine(Scored& scored, double best, double xi, std::normal_distribution<double>& step);
  std::vector<double> away_from_failures();
  double acquisition(const GaussianProcess& gp, const std::vector<double>& u, double best,
                     double xi) const;
  bool taken(const std::vector<double>& u) const;

  SearchSpace space_;
  BayesianOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> x_;  // observed points (snapped)
  std::vector<double> y_;
  std::vector<std::vector<double>> failed_;  // diverged points (snapped)
  std::vector<std::vector<double>> pending_;
  std::vector<std::vector<double>> design_;  // Latin hypercube left to suggest
  GaussianProcess gp_;
};

}  // namespace heft::tune
