// ctest-labels: unit
// The distribution's one source for each knob (config/distribution.h): heft-train's
// hyperparameters resolved into the spec's block by Distribution::with_overrides, each with
// the block's own rule, and check_world naming where the degrees came from.
#include "heft/config/distribution.h"

#include <gtest/gtest.h>

namespace heft::config {
namespace {

Distribution parsed(const std::string& json) {
  const Result<Distribution> d = Distribution::parse(nlohmann::json::parse(json));
  EXPECT_TRUE(d.ok()) << d.error();
  return d.ok() ? d.value() : Distribution{};
}

TEST(Distribution, HyperparametersOverrideTheBlockAndEnableIt) {
  const Distribution block = parsed(R"({"modelparallel": {"enabled": true, "parameters":
      {"partitions": 2, "microbatches": 4, "tensor_parallel_degree": 2}}})");
  Hyperparameters hp;
  hp.partitions = 4;
  hp.bf16 = true;
  const Result<Distribution> d = block.with_overrides(hp);
  ASSERT_TRUE(d.ok()) << d.error();
  const ModelParallel& m = d.value().modelparallel;
  EXPECT_EQ(m.partitions, 4);              // the hyperparameter
  EXPECT_EQ(m.microbatches, 4);            // the block's
  EXPECT_EQ(m.tensor_parallel_degree, 2);  // the block's
  EXPECT_TRUE(m.bf16);
  EXPECT_EQ(m.active_microbatches, 6);  // partitions + 2, of the partitions it runs with
  EXPECT_EQ(d.value().overridden, (std::vector<std::string>{"partitions", "bf16"}));

  // Without a block: the defaults, and a given knob enables model parallelism.
  hp = Hyperparameters{};
  hp.sharded_data_parallel_degree = 2;
  const Result<Distribution> alone = Distribution{}.with_overrides(hp);
  ASSERT_TRUE(alone.ok()) << alone.error();
  EXPECT_TRUE(alone.value().modelparallel.enabled);
  EXPECT_EQ(alone.value().modelparallel.sharded_data_parallel_degree, 2);
  EXPECT_EQ(alone.value().modelparallel.partitions, 1);
  EXPECT_EQ(alone.value().modelparallel.active_microbatches, 3);
}

TEST(Distribution, ADisabledBlocksParametersAreRefusedNotIgnored) {
  const Result<Distribution> off = Distribution::parse(nlohmann::json::parse(
      R"({"modelparallel": {"enabled": false, "parameters": {"partitions": 3}}})"));
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.error(), "distribution.modelparallel.parameters: applies with enabled: true only "
                         "(the parameters of a model-parallel block that is off are not used)");
  // Off without parameters: the defaults, and a hyperparameter still enables it.
  const Distribution block = parsed(R"({"modelparallel": {"enabled": false}})");
  Hyperparameters hp;
  hp.tensor_parallel_degree = 2;
  const Result<Distribution> d = block.with_overrides(hp);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().modelparallel.partitions, 1);
  EXPECT_EQ(d.value().modelparallel.placement_strategy, "cluster");
  EXPECT_EQ(d.value().modelparallel.tensor_parallel_degree, 2);
}

TEST(Distribution, AHyperparameterIsCheckedByTheBlocksRule) {
  Hyperparameters hp;
  hp.tensor_parallel_degree = 2000;
  EXPECT_EQ(Distribution{}.with_overrides(hp).error(),
            "hyperparameters.tensor_parallel_degree: expected an integer from 1 to 1024, found 2000");
  hp = Hyperparameters{};
  hp.pipeline = "simple";
  hp.virtual_stages = 2;
  EXPECT_EQ(Distribution{}.with_overrides(hp).error(),
            "hyperparameters.virtual_stages: needs pipeline: interleaved, found pipeline: simple");
  hp = Hyperparameters{};
  hp.partitions = 3;
  hp.partition_boundaries = "2";
  EXPECT_EQ(Distribution{}.with_overrides(hp).error(),
            "hyperparameters.partition_boundaries: expected 2 layer indices (one per stage "
            "after the first: partitions x virtual_stages - 1), found 1");
  hp.partition_boundaries = "2,4";
  const Result<Distribution> d = Distribution{}.with_overrides(hp);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value().modelparallel.partition_boundaries, (std::vector<int>{2, 4}));
  EXPECT_FALSE(d.value().modelparallel.auto_partition);  // a given split
}

TEST(Distribution, CheckWorldNamesWhereTheDegreesCameFrom) {
  const Distribution block = parsed(
      R"({"modelparallel": {"enabled": true, "parameters": {"tensor_parallel_degree": 3}}})");
  const Distribution from_block = block.with_overrides(Hyperparameters{}).value();
  EXPECT_EQ(from_block.check_world(4).error(),
            "distribution.modelparallel.parameters: tensor_parallel_degree x partitions = 3 must "
            "divide the 4 workers (instance_count x processes_per_host)");
  EXPECT_TRUE(from_block.check_world(6).ok());
  Hyperparameters hp;
  hp.partitions = 2;
  EXPECT_EQ(block.with_overrides(hp).value().check_world(4).error(),
            "hyperparameters.tensor_parallel_degree: 3 x partitions 2 must divide the 4 workers");
  hp = Hyperparameters{};
  hp.sharded_data_parallel_degree = 3;
  EXPECT_EQ(Distribution{}.with_overrides(hp).value().check_world(4).error(),
            "hyperparameters.sharded_data_parallel_degree: expected a divisor of the "
            "data-parallel degree 4, found 3 (4 workers / tensor_parallel_degree / partitions)");
}

TEST(Distribution, ParseJoinsEveryProblemOneALine) {
  const Result<Distribution> d = Distribution::parse(nlohmann::json::parse(
      R"({"modelparallel": {"enabled": true, "parameters": {"partitions": 0, "bf16": 2}}})"));
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.error(),
            "distribution.modelparallel.parameters.partitions: expected an integer from 1 to "
            "1024, found 0\n"
            "distribution.modelparallel.parameters.bf16: expected true or false, found 2");
}

}  // namespace
}  // namespace heft::config
