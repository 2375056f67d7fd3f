// Search spaces (src/heft/tune/search_space.h): each scaling round-trips and stays inside its
// bounds, Auto picks as documented, integers round, categoricals are one-hot, bad ranges are
// refused naming the range; grid enumerates exactly; random is reproducible from its seed;
// conditional ranges (a learning rate per optimizer) are active only under their condition.
#include "heft/tune/search_space.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "heft/error.h"
#include "heft/tune/grid_search.h"
#include "heft/tune/random_search.h"

namespace heft::tune {
namespace {

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(SearchSpace, EveryScalingRoundTripsInsideItsBounds) {
  SearchSpace s;
  s.add_continuous("lin", -2, 3, Scaling::kLinear);
  s.add_continuous("log", 1e-4, 1e-1, Scaling::kLogarithmic);
  s.add_continuous("rlog", 0.9, 0.999, Scaling::kReverseLogarithmic);
  for (const Range& r : s.ranges())
    for (double u = 0; u <= 1.0; u += 0.05) {
      const double x = scale_from_unit(r, u);
      EXPECT_GE(x, r.min) << r.name;
      EXPECT_LE(x, r.max) << r.name;
      EXPECT_NEAR(scale_to_unit(r, x), u, 1e-9) << r.name << " at u=" << u;
    }
  // Logarithmic: the midpoint of the cube is the geometric mean.
  EXPECT_NEAR(scale_from_unit(s.ranges()[1], 0.5), std::sqrt(1e-4 * 1e-1), 1e-12);
  // ReverseLogarithmic: 1 - x is geometric: the midpoint of 0.9..0.999 is 1 - sqrt(0.1 * 0.001).
  EXPECT_NEAR(scale_from_unit(s.ranges()[2], 0.5), 1 - std::sqrt(0.1 * 0.001), 1e-12);
  // Out-of-range values clamp.
  EXPECT_EQ(scale_to_unit(s.ranges()[0], 100), 1.0);
  EXPECT_EQ(scale_to_unit(s.ranges()[0], -100), 0.0);
}

TEST(SearchSpace, AutoIsLogarithmicForPositiveRangesOverTwoDecades) {
  SearchSpace s;
  s.add_continuous("lr", 1e-4, 1.0);
  s.add_continuous("dropout", 0.0, 0.5);
  s.add_integer("batch", 16, 256);
  EXPECT_EQ(s.ranges()[0].scaling, Scaling::kLogarithmic);
  EXPECT_EQ(s.ranges()[1].scaling, Scaling::kLinear);
  EXPECT_EQ(s.ranges()[2].scaling, Scaling::kLinear);  // 16x: under two decades
}

TEST(SearchSpace, IntegersRoundAndCategoricalsAreOneHot) {
  SearchSpace s;
  s.add_integer("layers", 1, 4, Scaling::kLinear);
  s.add_categorical("optimizer", {"sgd", "adam", "adamw"});
  EXPECT_EQ(s.dims(), 4);
  const Config c = s.from_unit({0.49, 0.1, 0.7, 0.2});
  EXPECT_EQ(std::get<int64_t>(c.at("layers")), 2);  // 1 + 0.49 * 3 = 2.47
  EXPECT_EQ(std::get<std::string>(c.at("optimizer")), "adam");
  EXPECT_EQ(s.to_unit(c), (std::vector<double>{1.0 / 3, 0, 1, 0}));
  EXPECT_EQ(s.snap({0.49, 0.1, 0.7, 0.2}), (std::vector<double>{1.0 / 3, 0, 1, 0}));
  EXPECT_EQ(value_text(c.at("layers")), "2");
  EXPECT_EQ(value_text(ParamValue(0.001)), "0.001");
}

TEST(SearchSpace, BadRangesAreRefusedNamingTheRange) {
  SearchSpace s;
  EXPECT_EQ(error_of([&] { s.add_continuous("lr", 0.1, 0.01); }),
            "hyperparameter_ranges.lr: min (0.1) is greater than max (0.01)");
  EXPECT_EQ(error_of([&] { s.add_continuous("lr", 0, 1, Scaling::kLogarithmic); }),
            "hyperparameter_ranges.lr: Logarithmic scaling needs min > 0, found min 0");
  EXPECT_EQ(error_of([&] { s.add_continuous("m", 0.5, 1.0, Scaling::kReverseLogarithmic); }),
            "hyperparameter_ranges.m: ReverseLogarithmic scaling needs 0 <= min and max < 1, found [0.5, 1]");
  EXPECT_EQ(error_of([&] { s.add_categorical("opt", {}); }),
            "hyperparameter_ranges.opt: expected at least one value");
  EXPECT_EQ(error_of([&] { s.add_categorical("opt", {"sgd", "sgd"}); }),
            "hyperparameter_ranges.opt: the value 'sgd' appears twice");
  s.add_integer("batch", 1, 2);
  EXPECT_EQ(error_of([&] { s.add_integer("batch", 1, 2); }).find("hyperparameter_ranges.batch: defined twice"), 0u);
  EXPECT_EQ(error_of([] { parse_scaling("Log"); }),
            "scaling: expected Auto, Linear, Logarithmic or ReverseLogarithmic, found 'Log'");
}

// lr per optimizer (one name, two ranges), momentum for sgd only.
SearchSpace per_optimizer() {
  SearchSpace s;
  s.add_continuous("lr", 1e-3, 1e-1, Scaling::kLogarithmic, {"optimizer", {"sgd"}});
  s.add_continuous("lr", 1e-4, 1e-2, Scaling::kLogarithmic, {"optimizer", {"adamw"}});
  s.add_continuous("momentum", 0.5, 0.95, Scaling::kLinear, {"optimizer", {"sgd"}});
  s.add_categorical("optimizer", {"sgd", "adamw"});
  s.check_conditions();
  return s;
}

TEST(SearchSpace, ConditionalRangesAreActiveOnlyUnderTheirCondition) {
  const SearchSpace s = per_optimizer();
  EXPECT_EQ(s.dims(), 5);
  EXPECT_EQ(s.active_dims(), 4);  // sgd: lr, momentum and the two optimizer coordinates
  // u: lr@sgd, lr@adamw, momentum@sgd, optimizer one-hot.
  const Config adamw = s.from_unit({0.0, 0.5, 1.0, 0.2, 0.9});
  ASSERT_EQ(adamw.size(), 2u);  // no momentum
  EXPECT_EQ(std::get<std::string>(adamw.at("optimizer")), "adamw");
  EXPECT_NEAR(std::get<double>(adamw.at("lr")), 1e-3, 1e-12);
  // The inactive coordinates snap to 0.5, so the point is the same whatever they were.
  const std::vector<double> snapped = s.snap({0.0, 0.5, 1.0, 0.2, 0.9});
  const std::vector<double> expected = {0.5, 0.5, 0.5, 0, 1};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(snapped[i], expected[i], 1e-12) << i;
  const Config sgd = s.from_unit({1.0, 0.0, 0.0, 0.9, 0.2});
  EXPECT_NEAR(std::get<double>(sgd.at("lr")), 0.1, 1e-12);
  EXPECT_NEAR(std::get<double>(sgd.at("momentum")), 0.5, 1e-12);
  const std::vector<double> u = s.to_unit(sgd), want = {1.0, 0.5, 0.0, 1, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(u[i], want[i], 1e-12) << i;
  // A value outside the active range is clamped onto it (adamw's lr tops out at 1e-2).
  EXPECT_EQ(s.to_unit({{"optimizer", std::string("adamw")}, {"lr", 0.05}})[1], 1.0);
  EXPECT_NE(error_of([&] { s.to_unit({{"optimizer", std::string("sgd")}, {"lr", 0.01}}); }).find("'momentum'"),
            std::string::npos);
  // Random draws hold only the active ranges' values, each inside its own range.
  RandomSearch random(s, 3);
  for (int i = 0; i < 200; ++i) {
    const Config c = *random.suggest();
    const bool is_sgd = std::get<std::string>(c.at("optimizer")) == "sgd";
    EXPECT_EQ(c.count("momentum"), is_sgd ? 1u : 0u);
    const double lr = std::get<double>(c.at("lr"));
    EXPECT_GE(lr, is_sgd ? 1e-3 : 1e-4);
    EXPECT_LE(lr, is_sgd ? 1e-1 : 1e-2);
  }
}

TEST(SearchSpace, BadConditionsAreRefusedNamingTheRange) {
  SearchSpace s;
  s.add_continuous("lr", 1e-3, 1e-1, Scaling::kLogarithmic, {"optimizer", {"sgd"}});
  // A shared name needs conditions that cannot hold together.
  EXPECT_NE(error_of([&] { s.add_continuous("lr", 1e-4, 1e-2, Scaling::kAuto, {"optimizer", {"sgd", "adamw"}}); })
                .find("hyperparameter_ranges.lr: defined twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { s.add_continuous("lr", 1e-4, 1e-2); }).find("defined twice"), std::string::npos);
  SearchSpace missing = s;
  EXPECT_EQ(error_of([&] { missing.check_conditions(); }),
            "hyperparameter_ranges.lr: when: expected the name of a categorical range, found 'optimizer'");
  s.add_categorical("optimizer", {"sgd", "adamw"});
  s.add_integer("width", 1, 4, Scaling::kLinear, {"optimizer", {"adam"}});
  EXPECT_EQ(error_of([&] { s.check_conditions(); }),
            "hyperparameter_ranges.width: when: 'adam' is not one of optimizer's values");
}

TEST(GridSearch, AConditionalRangeIsEnumeratedWhereActiveOnly) {
  SearchSpace s;
  s.add_integer("width", 1, 3, Scaling::kLinear, {"model", {"cnn"}});
  s.add_categorical("model", {"cnn", "mlp"});
  s.check_conditions();
  GridSearch grid(s);
  std::vector<Config> seen;
  while (auto c = grid.suggest()) seen.push_back(*c);
  // cnn with each width, mlp once without one.
  ASSERT_EQ(seen.size(), 4u);
  int mlp = 0;
  for (const Config& c : seen)
    if (std::get<std::string>(c.at("model")) == "mlp") {
      ++mlp;
      EXPECT_EQ(c.count("width"), 0u);
    }
  EXPECT_EQ(mlp, 1);
}

TEST(GridSearch, EnumeratesEveryCombinationOnceThenStops) {
  SearchSpace s;
  s.add_integer("layers", 1, 3);
  s.add_categorical("optimizer", {"sgd", "adam"});
  GridSearch grid(s);
  EXPECT_EQ(grid.size(), 6u);
  std::set<std::pair<int64_t, std::string>> seen;
  while (auto c = grid.suggest())
    seen.insert({std::get<int64_t>(c->at("layers")), std::get<std::string>(c->at("optimizer"))});
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_FALSE(grid.suggest().has_value());
  SearchSpace continuous;
  continuous.add_continuous("lr", 0.1, 1);
  EXPECT_NE(error_of([&] { GridSearch g(continuous); }).find("hyperparameter_ranges.lr: grid search"),
            std::string::npos);
}

TEST(RandomSearch, IsReproducibleFromItsSeedAndCoversTheRange) {
  SearchSpace s;
  s.add_continuous("lr", 1e-5, 1e-1, Scaling::kLogarithmic);
  s.add_categorical("optimizer", {"sgd", "adam"});
  RandomSearch a(s, 7), b(s, 7), c(s, 8);
  int below_1e3 = 0, adam = 0;
  bool differs = false;
  for (int i = 0; i < 400; ++i) {
    const Config x = *a.suggest(), y = *b.suggest(), z = *c.suggest();
    EXPECT_EQ(x, y);
    differs |= x != z;
    const double lr = std::get<double>(x.at("lr"));
    ASSERT_GE(lr, 1e-5);
    ASSERT_LE(lr, 1e-1);
    below_1e3 += lr < 1e-3;
    adam += std::get<std::string>(x.at("optimizer")) == "adam";
  }
  EXPECT_TRUE(differs);
  // Log-uniform: half the draws below the geometric midpoint 1e-3 (binomial sd 10).
  EXPECT_NEAR(below_1e3, 200, 50);
  EXPECT_NEAR(adam, 200, 50);
}

}  // namespace
}  // namespace heft::tune
