// ctest-labels: unit
// The auto_layout and memory_limit_gb knobs (config/distribution.h): read from the block and
// from heft-train's hyperparameters, round-tripped through to_json, checked by their rules
// (memory_limit_gb positive and only with auto_layout), and auto_layout beside a knob it
// chooses (a degree, micro-batches, checkpointing, gradient accumulation) is an error naming
// both, whichever side gave each.
#include <gtest/gtest.h>

#include "heft/config/distribution.h"

namespace heft::config {
namespace {

const char* kBlock = R"({"modelparallel": {"enabled": true, "parameters": {"auto_layout": true,
    "memory_limit_gb": 2.5}}})";

std::string error_of(const std::string& json, const Hyperparameters& hp = {}) {
  const Result<Distribution> d = Distribution::parse(nlohmann::json::parse(json));
  if (!d.ok()) return d.error();
  const Result<Distribution> r = d.value().with_overrides(hp);
  return r.ok() ? "" : r.error();
}

TEST(AutoLayoutConfig, TheBlocksKeysAreReadAndRoundTrip) {
  const Result<Distribution> d = Distribution::parse(nlohmann::json::parse(kBlock));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_TRUE(d.value().modelparallel.auto_layout);
  EXPECT_DOUBLE_EQ(d.value().modelparallel.memory_limit_gb, 2.5);
  const Result<Distribution> again = Distribution::parse(d.value().to_json());
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_TRUE(again.value().modelparallel.auto_layout);
  EXPECT_DOUBLE_EQ(again.value().modelparallel.memory_limit_gb, 2.5);
  // Resolved (every knob written out, as HEFT_DISTRIBUTION carries it) still parses: the
  // chosen knobs at their defaults are not a conflict.
  const Result<Distribution> resolved = d.value().with_overrides({});
  ASSERT_TRUE(resolved.ok()) << resolved.error();
  EXPECT_TRUE(Distribution::parse(resolved.value().to_json()).ok());
}

TEST(AutoLayoutConfig, HyperparametersEnableItAndGiveTheLimit) {
  Hyperparameters hp;
  hp.auto_layout = true;
  hp.memory_limit_gb = 3;
  const Distribution none;  // named: GCC 12 -O3 warns maybe-uninitialized on the temporary
  const Result<Distribution> d = none.with_overrides(hp);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_TRUE(d.value().modelparallel.enabled);
  EXPECT_TRUE(d.value().modelparallel.auto_layout);
  EXPECT_DOUBLE_EQ(d.value().modelparallel.memory_limit_gb, 3);
}

TEST(AutoLayoutConfig, ADegreeBesideItIsAnErrorNamingBoth) {
  const std::string e = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"auto_layout": true, "partitions": 2}}})");
  EXPECT_NE(e.find("distribution.modelparallel.parameters.auto_layout: true chooses "
                   "distribution.modelparallel.parameters.partitions itself, but "
                   "distribution.modelparallel.parameters.partitions is 2"),
            std::string::npos)
      << e;
  Hyperparameters hp;
  hp.tensor_parallel_degree = 2;
  const std::string h = error_of(kBlock, hp);
  EXPECT_NE(h.find("distribution.modelparallel.parameters.auto_layout: true chooses "
                   "hyperparameters.tensor_parallel_degree itself"),
            std::string::npos)
      << h;
  hp = Hyperparameters{};
  hp.auto_layout = true;
  hp.activation_checkpointing = true;
  const std::string c = error_of("{}", hp);
  EXPECT_NE(c.find("hyperparameters.auto_layout: true chooses hyperparameters.activation_checkpointing"),
            std::string::npos)
      << c;
  hp.activation_checkpointing = false;
  hp.gradient_accumulation = 4;
  const std::string g = error_of("{}", hp);
  EXPECT_NE(g.find("hyperparameters.auto_layout: true chooses hyperparameters.gradient_accumulation itself, "
                   "but hyperparameters.gradient_accumulation is 4"),
            std::string::npos)
      << g;
}

TEST(AutoLayoutConfig, MemoryLimitNeedsAutoLayoutAndAPositiveNumber) {
  const std::string e = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"memory_limit_gb": 2}}})");
  EXPECT_NE(e.find("distribution.modelparallel.parameters.memory_limit_gb: applies with auto_layout true only"),
            std::string::npos)
      << e;
  const std::string zero = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"auto_layout": true, "memory_limit_gb": 0}}})");
  EXPECT_NE(zero.find("memory_limit_gb: expected a number of GB above 0 and at most 1000000, found 0"),
            std::string::npos)
      << zero;
  Hyperparameters hp;
  hp.memory_limit_gb = 1;
  const std::string h = error_of("{}", hp);
  EXPECT_NE(h.find("hyperparameters.memory_limit_gb: applies with auto_layout true only"), std::string::npos) << h;
  const std::string typo = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"auto_layot": true}}})");
  EXPECT_NE(typo.find("did you mean 'auto_layout'?"), std::string::npos) << typo;
}

TEST(AutoLayoutConfig, TrialsAreReadCheckedAndRoundTrip) {
  const Result<Distribution> d = Distribution::parse(nlohmann::json::parse(
      R"({"modelparallel": {"enabled": true, "parameters": {"auto_layout": true, "auto_layout_trials": 4}}})"));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().modelparallel.auto_layout_trials, 4);
  const Result<Distribution> again = Distribution::parse(d.value().to_json());
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again.value().modelparallel.auto_layout_trials, 4);
  EXPECT_EQ(Distribution{}.modelparallel.auto_layout_trials, 6);  // the default
  Hyperparameters hp;
  hp.auto_layout_trials = 0;  // the hyperparameter overrides the block
  const Result<Distribution> r = d.value().with_overrides(hp);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().modelparallel.auto_layout_trials, 0);
  const std::string bad = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"auto_layout": true, "auto_layout_trials": 17}}})");
  EXPECT_NE(bad.find("distribution.modelparallel.parameters.auto_layout_trials: expected an integer from 0 to 16, "
                     "found 17"),
            std::string::npos)
      << bad;
  const std::string alone = error_of(R"({"modelparallel": {"enabled": true, "parameters":
      {"auto_layout_trials": 2}}})");
  EXPECT_NE(alone.find("distribution.modelparallel.parameters.auto_layout_trials: applies with auto_layout true only"),
            std::string::npos)
      << alone;
  hp.auto_layout_trials = 17;
  const std::string h = error_of(kBlock, hp);
  EXPECT_NE(h.find("hyperparameters.auto_layout_trials: expected an integer from 0 to 16, found 17"),
            std::string::npos)
      << h;
}

}  // namespace
}  // namespace heft::config
