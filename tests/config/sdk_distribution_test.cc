// ctest-labels: unit
// The cloud SDK's distribution dicts (config/sdk_distribution.h): each dict read verbatim into
// heft's form and the launch it asks for, and the model-parallel library's parameter table
// walked name by name: every name heft reads is used (its effect on the distribution heft-train
// runs is shown here) or refused naming it.
#include "heft/config/sdk_distribution.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>

#include "heft/config/distribution.h"

namespace heft::config {
namespace {

using nlohmann::json;

Result<Distribution> parse(const std::string& text) {
  return Distribution::parse(json::parse(text));
}

// The distribution heft-train runs for `block` (no hyperparameters over it).
Distribution resolved(const std::string& block) {
  const Result<Distribution> d = parse(block);
  EXPECT_TRUE(d.ok()) << block << ": " << d.error();
  if (!d.ok()) return {};
  const Result<Distribution> r = d.value().with_overrides(Hyperparameters{});
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? r.value() : Distribution{};
}

std::string smp(const std::string& parameters) {
  return R"({"smdistributed": {"modelparallel": {"enabled": true, "parameters": )" + parameters +
         R"(}}, "mpi": {"enabled": true, "processes_per_host": 4}})";
}

TEST(SdkDistribution, SmdistributedDataparallelIsHeftsDataParallel) {
  const Distribution d = resolved(
      R"({"smdistributed": {"dataparallel": {"enabled": true, "custom_mpi_options": "-x A=1"}}})");
  EXPECT_TRUE(d.dataparallel);
  EXPECT_FALSE(d.modelparallel.enabled);
  EXPECT_EQ(d.launch.dicts, std::vector<std::string>{"smdistributed.dataparallel"});
  EXPECT_EQ(d.launch.custom_mpi_options, "-x A=1");
  EXPECT_EQ(d.launch.custom_mpi_options_field,
            "distribution.smdistributed.dataparallel.custom_mpi_options");
  EXPECT_EQ(d.launch.framework_parameters(2),
            json({{"sagemaker_distributed_dataparallel_enabled", true},
                  {"sagemaker_distributed_dataparallel_custom_mpi_options", "-x A=1"}}));
  EXPECT_EQ(d.to_json(), json::parse(R"({"dataparallel": {"enabled": true}})"));
}

TEST(SdkDistribution, ModelparallelWithMpiIsHeftsModelParallelAndTheLaunch) {
  const Distribution d = resolved(smp(R"({"partitions": 2, "microbatches": 4, "ddp": true})"));
  EXPECT_TRUE(d.modelparallel.enabled);
  EXPECT_EQ(d.modelparallel.partitions, 2);
  EXPECT_EQ(d.modelparallel.microbatches, 4);
  EXPECT_EQ(d.modelparallel.ddp, std::optional<bool>(true));
  EXPECT_EQ(d.parameters_field, "distribution.smdistributed.modelparallel.parameters");
  EXPECT_EQ(d.launch.dicts, (std::vector<std::string>{"smdistributed.modelparallel", "mpi"}));
  EXPECT_EQ(d.launch.processes_per_host, 4);
  EXPECT_EQ(d.launch.mp_parameters, json::parse(R"({"partitions": 2, "microbatches": 4, "ddp": true})"));
  EXPECT_EQ(d.launch.framework_parameters(4),
            json({{"sagemaker_mpi_enabled", true},
                  {"sagemaker_mpi_num_of_processes_per_host", 4},
                  {"sagemaker_mpi_custom_mpi_options", ""}}));
  // heft's form reads back to the same knobs.
  const Distribution again = resolved(d.to_json().dump());
  EXPECT_EQ(again.to_json(), d.to_json());
  EXPECT_TRUE(again.launch.dicts.empty());
  // Messages about the degrees name the block where the user wrote it.
  EXPECT_EQ(d.check_world(3).error(),
            "distribution.smdistributed.modelparallel.parameters: tensor_parallel_degree x "
            "partitions = 2 must divide the 3 workers (instance_count x processes_per_host)");
}

TEST(SdkDistribution, TorchDistributedAndPytorchddpAreDataParallelLaunchers) {
  for (const std::string launcher : {"torch_distributed", "pytorchddp"}) {
    const Distribution d = resolved(R"({")" + launcher + R"(": {"enabled": true}})");
    EXPECT_TRUE(d.dataparallel) << launcher;
    EXPECT_EQ(d.launch.dicts, std::vector<std::string>{launcher});
    const std::string flag = launcher == "pytorchddp" ? "sagemaker_pytorch_ddp_enabled"
                                                      : "sagemaker_torch_distributed_enabled";
    EXPECT_EQ(d.launch.framework_parameters(1), json({{flag, true}}));
    const Distribution off = resolved(R"({")" + launcher + R"(": {"enabled": false}})");
    EXPECT_FALSE(off.dataparallel);
    EXPECT_TRUE(off.launch.dicts.empty());
  }
  // SMP v2: torch_distributed with the v2 names.
  const Distribution v2 = resolved(R"({"torch_distributed": {"enabled": true}, "smdistributed":
      {"modelparallel": {"enabled": true, "parameters": {"hybrid_shard_degree": 2,
       "tensor_parallel_degree": 1, "context_parallel_degree": 1}}}})");
  EXPECT_EQ(v2.modelparallel.sharded_data_parallel_degree, 2);
  EXPECT_TRUE(v2.dataparallel);
}

TEST(SdkDistribution, MpiAloneIsTheLaunchOnly) {
  const Distribution d = resolved(
      R"({"mpi": {"enabled": true, "processes_per_host": 2, "custom_mpi_options": "--bind-to none"}})");
  EXPECT_FALSE(d.dataparallel);
  EXPECT_FALSE(d.modelparallel.enabled);
  EXPECT_EQ(d.launch.processes_per_host, 2);
  EXPECT_EQ(d.launch.custom_mpi_options, "--bind-to none");
  EXPECT_EQ(d.to_json(), json::object());
}

TEST(SdkDistribution, EveryMistakeIsNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"pytorchdp": {"enabled": true}})",
       "distribution.pytorchdp: unknown field; did you mean 'pytorchddp'?"},
      {R"({"mpi": {"enabled": false, "processes_per_host": 2}})",
       "distribution.mpi.processes_per_host: applies with enabled: true only"},
      {R"({"mpi": {"enabled": true, "processes_per_host": 0}})",
       "distribution.mpi.processes_per_host: expected an integer from 1 to 1024, found 0"},
      {R"({"mpi": {"enabled": true, "custom_mpi_options": "-a"}, "smdistributed":
          {"dataparallel": {"enabled": true, "custom_mpi_options": "-b"}}})",
       "distribution.mpi.custom_mpi_options: differs from "
       "distribution.smdistributed.dataparallel.custom_mpi_options ('-b'); give the options once"},
      {R"({"torch_distributed": {"enabled": "yes"}})",
       "distribution.torch_distributed.enabled: expected true or false, found 'yes'"},
      {R"({"modelparallel": {"enabled": true}, "smdistributed": {"modelparallel": {"enabled": true}}})",
       "distribution.smdistributed.modelparallel: given twice (also distribution.modelparallel); give one"},
      {R"({"smdistributed": {"modelparalel": {}}})",
       "distribution.smdistributed.modelparalel: unknown field; did you mean 'modelparallel'?"},
      {smp(R"({"partitions": 2, "pipeline_parallel_degree": 2})"),
       "distribution.smdistributed.modelparallel.parameters.pipeline_parallel_degree: given twice "
       "(also partitions, heft's name for it); give one"},
  };
  for (const auto& [block, message] : cases) {
    const Result<Distribution> d = parse(block);
    ASSERT_FALSE(d.ok()) << block;
    EXPECT_NE(d.error().find(message), std::string::npos) << d.error();
  }
}

// Each used name: a value and what it changes in the distribution heft-train runs.
using Check = std::function<void(const Distribution&)>;
const std::map<std::string, std::pair<std::string, Check>>& used_effects() {
  static const std::map<std::string, std::pair<std::string, Check>> effects = {
      {"partitions", {R"({"partitions": 2})", [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.partitions, 2);
         EXPECT_EQ(d.data_parallel_degree(4), 2);
       }}},
      {"microbatches", {R"({"microbatches": 4})",
                        [](const Distribution& d) { EXPECT_EQ(d.modelparallel.microbatches, 4); }}},
      {"pipeline", {R"({"pipeline": "simple"})",
                    [](const Distribution& d) { EXPECT_EQ(d.modelparallel.pipeline, "simple"); }}},
      {"optimize", {R"({"optimize": "memory"})", [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.optimize, "memory");
         EXPECT_DOUBLE_EQ(d.modelparallel.memory_weight, 0.8);  // the partitioner's weight
       }}},
      {"memory_weight", {R"({"memory_weight": 0.5})", [](const Distribution& d) {
         EXPECT_DOUBLE_EQ(d.modelparallel.memory_weight, 0.5);
       }}},
      {"placement_strategy", {R"({"placement_strategy": "spread"})", [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.placement_strategy, "spread");
       }}},
      {"auto_partition", {R"({"partitions": 2, "auto_partition": false})",
                          [](const Distribution& d) { EXPECT_FALSE(d.modelparallel.auto_partition); }}},
      {"default_partition", {R"({"partitions": 2, "default_partition": 1})",
                             [](const Distribution& d) { EXPECT_EQ(d.modelparallel.default_partition, 1); }}},
      {"active_microbatches", {R"({"partitions": 2, "active_microbatches": 3})",
                               [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.active_microbatches, 3);  // not partitions + 2
       }}},
      {"activation_checkpointing", {R"({"activation_checkpointing": true})",
                                    [](const Distribution& d) {
         EXPECT_TRUE(d.modelparallel.activation_checkpointing);
       }}},
      {"bf16", {R"({"bf16": true})", [](const Distribution& d) { EXPECT_TRUE(d.modelparallel.bf16); }}},
      {"ddp", {R"({"partitions": 2, "ddp": false})", [](const Distribution& d) {
         EXPECT_TRUE(d.check_world(2).ok());  // one replica: nothing to reduce
         EXPECT_EQ(d.check_world(4).error(),
                   "distribution.smdistributed.modelparallel.parameters.ddp: false asks for no "
                   "data parallelism across the 2 model replicas (4 workers / "
                   "tensor_parallel_degree / partitions), but heft always reduces their "
                   "gradients; expected true (or nothing), or a data-parallel degree of 1");
       }}},
      {"tensor_parallel_degree", {R"({"tensor_parallel_degree": 2})", [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.tensor_parallel_degree, 2);
         EXPECT_EQ(d.data_parallel_degree(4), 2);
       }}},
      {"sharded_data_parallel_degree", {R"({"sharded_data_parallel_degree": 2})",
                                        [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.sharded_data_parallel_degree, 2);
         EXPECT_FALSE(d.check_world(3).ok());  // 2 must divide the data-parallel degree
       }}},
      {"partition_boundaries", {R"({"partitions": 2, "auto_partition": false,
                                    "partition_boundaries": [3]})", [](const Distribution& d) {
         EXPECT_EQ(d.modelparallel.partition_boundaries, std::vector<int>{3});
       }}},
      {"virtual_stages", {R"({"partitions": 2, "virtual_stages": 2})",
                          [](const Distribution& d) { EXPECT_EQ(d.modelparallel.virtual_stages, 2); }}},
  };
  return effects;
}

TEST(SdkDistribution, EveryParameterIsUsedOrRefusedByName) {
  std::set<std::string> used;
  for (const ParameterRule& rule : model_parallel_parameter_table()) {
    SCOPED_TRACE(rule.name);
    const std::string field = "distribution.smdistributed.modelparallel.parameters." + rule.name;
    if (rule.use == ParameterUse::kUsed) {
      used.insert(rule.name);
      const auto effect = used_effects().find(rule.name);
      ASSERT_NE(effect, used_effects().end()) << "no test shows the effect of " << rule.name;
      effect->second.second(resolved(smp(effect->second.first)));
    } else if (rule.use == ParameterUse::kAlias) {
      const Distribution d = resolved(smp(R"({")" + rule.name + R"(": 2})"));
      EXPECT_EQ(d.to_json()["modelparallel"]["parameters"][rule.detail], 2);
    } else if (rule.use == ParameterUse::kScript) {
      // The script's: no knob of heft's, carried as given; heft-train refuses it by name.
      const Result<Distribution> d = parse(smp(R"({")" + rule.name + R"(": 2})"));
      ASSERT_TRUE(d.ok()) << d.error();
      EXPECT_FALSE(d.value().to_json()["modelparallel"]["parameters"].contains(rule.name));
      EXPECT_EQ(d.value().launch.mp_parameters[rule.name], 2);
      const std::vector<std::string> refused =
          script_parameters_for_trainer(d.value().launch.mp_parameters, d.value().parameters_field);
      ASSERT_EQ(refused.size(), 1u);
      EXPECT_EQ(refused[0].rfind(field + ": not supported by heft-train: " + rule.detail, 0), 0u)
          << refused[0];
    } else {
      const Result<Distribution> d = parse(smp(R"({")" + rule.name + R"(": 2})"));
      ASSERT_FALSE(d.ok());
      EXPECT_EQ(d.error(), field + ": not supported: " + rule.detail);
    }
  }
  EXPECT_EQ(used.size(), used_effects().size()) << "an effect is shown for a name not in the table";
  // Degrees of a parallelism heft lacks are accepted at 1; hybrid_shard_degree 0 is no sharding.
  EXPECT_TRUE(parse(smp(R"({"context_parallel_degree": 1, "expert_parallel_degree": 1})")).ok());
  EXPECT_EQ(resolved(smp(R"({"hybrid_shard_degree": 0})")).modelparallel.sharded_data_parallel_degree, 1);
  // A name in no table: the nearest known.
  EXPECT_EQ(parse(smp(R"({"microbatch": 2})")).error(),
            "distribution.smdistributed.modelparallel.parameters.microbatch: unknown field; did "
            "you mean 'microbatches'?");
}

}  // namespace
}  // namespace heft::config
