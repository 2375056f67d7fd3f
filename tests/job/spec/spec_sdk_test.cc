// ctest-labels: unit
// The cloud SDK's distribution dicts in a job spec (spec_sdk.h, spec.cc): what they ask of the
// cluster lands there, what cannot be honoured is refused naming the field and its line, the
// normalized spec (--print-spec) is itself the same job; and the job-level part of the
// training toolkit's contract (spec_env.h): arguments, framework parameters, the input config
// files.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "support/files.h"

namespace heft::job {
namespace {

using nlohmann::json;

const std::string kBase = "name: sdk\nentry_point: [python3, train.py]\n";

JobSpec parsed(const std::string& text) {
  const Result<JobSpec> s = parse_spec(text, "s.yaml");
  EXPECT_TRUE(s.ok()) << s.error();
  return s.ok() ? s.value() : JobSpec{};
}

std::string refused(const std::string& text) {
  const Result<JobSpec> s = parse_spec(text, "s.yaml");
  EXPECT_FALSE(s.ok()) << text;
  return s.error();
}

TEST(SpecSdk, MpiProcessesPerHostIsTheClusters) {
  const JobSpec s = parsed(kBase + "cluster: {instance_count: 2}\n"
                           "distribution:\n"
                           "  smdistributed: {modelparallel: {enabled: true, parameters: "
                           "{partitions: 2, ddp: true}}}\n"
                           "  mpi: {enabled: true, processes_per_host: 2}\n");
  EXPECT_EQ(s.cluster.processes_per_host, 2);
  EXPECT_EQ(s.world_size(), 4);
  EXPECT_EQ(s.distribution_config.data_parallel_degree(4), 2);
  EXPECT_EQ(s.distribution_normalized["modelparallel"]["parameters"]["partitions"], 2);
  EXPECT_FALSE(s.distribution_normalized.contains("smdistributed"));
  // The same given in the cluster block too: fine; a different number: refused, with its line.
  EXPECT_EQ(parsed(kBase + "cluster: {processes_per_host: 2}\n"
                           "distribution: {mpi: {enabled: true, processes_per_host: 2}}\n")
                .world_size(),
            2);
  EXPECT_EQ(refused(kBase + "cluster: {processes_per_host: 3}\n"
                            "distribution:\n  mpi: {enabled: true, processes_per_host: 2}\n"),
            "s.yaml:5: distribution.mpi.processes_per_host: expected cluster.processes_per_host "
            "(3) or nothing, found 2 (mpi.processes_per_host is the workers on each host)");
}

TEST(SpecSdk, MpiOptionsNeedTheMpirunLauncher) {
  EXPECT_EQ(refused(kBase + "distribution:\n  smdistributed:\n    dataparallel: {enabled: true, "
                            "custom_mpi_options: -verbose}\n"),
            "s.yaml:5: distribution.smdistributed.dataparallel.custom_mpi_options: mpirun's "
            "options need cluster.launcher: mpirun (mpirun then starts the workers with them), "
            "found launcher local; remove them or run the job under mpirun");
  const JobSpec s = parsed(kBase + "cluster: {launcher: mpirun, hosts: [a, b]}\n"
                           "distribution: {mpi: {enabled: true, custom_mpi_options: '-x A=1'}}\n");
  EXPECT_EQ(s.cluster.custom_mpi_options, "-x A=1");
  EXPECT_NE(refused(kBase + "cluster: {launcher: mpirun, hosts: [a], custom_mpi_options: '-x B'}\n"
                            "distribution: {mpi: {enabled: true, custom_mpi_options: '-x A'}}\n")
                .find("distribution.mpi.custom_mpi_options: differs from "
                      "cluster.custom_mpi_options ('-x B')"),
            std::string::npos);
}

TEST(SpecSdk, RefusedNamesCarryTheirFieldAndLine) {
  EXPECT_EQ(refused(kBase + "distribution:\n  smdistributed:\n    modelparallel:\n"
                            "      enabled: true\n      parameters:\n        fp16: true\n"),
            "s.yaml:8: distribution.smdistributed.modelparallel.parameters.fp16: not supported: "
            "heft-train computes in float32 or bfloat16, not float16 (use bf16: true)");
  EXPECT_EQ(refused(kBase + "cluster: {processes_per_host: 4}\ndistribution:\n  modelparallel:\n"
                            "    enabled: true\n    parameters: {partitions: 2, ddp: false}\n"),
            "s.yaml:7: distribution.modelparallel.parameters.ddp: false asks for no data "
            "parallelism across the 2 model replicas (4 workers / tensor_parallel_degree / "
            "partitions), but heft always reduces their gradients; expected true (or nothing), "
            "or a data-parallel degree of 1");
}

TEST(SpecSdk, TheNormalizedSpecIsTheSameJob) {
  const JobSpec s = parsed(kBase + "cluster: {instance_count: 2}\n"
                           "distribution: {smdistributed: {modelparallel: {enabled: true, "
                           "parameters: {pipeline_parallel_degree: 2, hybrid_shard_degree: 2}}}, "
                           "mpi: {enabled: true, processes_per_host: 2}}\n");
  const json normalized = normalized_spec_json(s);
  EXPECT_EQ(normalized["cluster"]["processes_per_host"], 2);
  const JobSpec again = parsed(normalized.dump());
  EXPECT_EQ(again.world_size(), 4);
  EXPECT_EQ(again.distribution_normalized, s.distribution_normalized);
  EXPECT_EQ(again.distribution_config.modelparallel.partitions, 2);
  EXPECT_EQ(again.distribution_config.modelparallel.sharded_data_parallel_degree, 2);
  // The database keeps the block as given: read again (heft resume), the same launch.
  const JobSpec resumed = spec_from_json(spec_to_json(s), "job 'sdk'").value();
  EXPECT_EQ(resumed.distribution_config.launch.dicts, s.distribution_config.launch.dicts);
  EXPECT_EQ(resumed.world_size(), 4);
}

TEST(SpecSdk, ArgumentsAreTheToolkitsAndFrameworkParametersStayOut) {
  const JobSpec s = parsed(kBase + "hyperparameters: {lr: 0.050, b: 8, amp: true, off: false, "
                           "tag: '7', sagemaker_program: train.py, sagemaker_container_log_level: 10}\n"
                           "distribution: {pytorchddp: {enabled: true}}\n");
  EXPECT_EQ(hyperparameter_args(s),
            (std::vector<std::string>{"--amp", "True", "--b", "8", "--lr", "0.050", "--off",
                                      "False", "--tag", "7"}));
  test::TempDir dir;
  const Environment env = training_environment(s, job_paths(dir.path(), "sdk"));
  EXPECT_EQ(env.at("SM_HPS"), R"({"amp":true,"b":8,"lr":0.05,"off":false,"tag":"7"})");
  EXPECT_EQ(env.count("SM_HP_SAGEMAKER_PROGRAM"), 0u);
  EXPECT_EQ(json::parse(env.at("SM_FRAMEWORK_PARAMS")),
            json({{"sagemaker_pytorch_ddp_enabled", true},
                  {"sagemaker_program", "train.py"},
                  {"sagemaker_container_log_level", 10}}));
  EXPECT_EQ(env.at("SM_LOG_LEVEL"), "10");
  EXPECT_EQ(env.at("SM_USER_ENTRY_POINT"), "train.py");
  EXPECT_EQ(env.at("SM_MODULE_NAME"), "train");
  EXPECT_EQ(env.at("HEFT_DISTRIBUTION"), R"({"dataparallel":{"enabled":true}})");
  EXPECT_EQ(env.at("SM_OUTPUT_INTERMEDIATE_DIR"), dir.path() + "/jobs/sdk/output/intermediate");
  EXPECT_EQ(env.count("SM_HP_MP_PARAMETERS"), 0u);
}

TEST(SpecSdk, ModelParallelParametersReachTheScriptAsGiven) {
  const JobSpec s = parsed(kBase + "cluster: {processes_per_host: 2}\n"
                           "distribution: {smdistributed: {modelparallel: {enabled: true, "
                           "parameters: {pipeline_parallel_degree: 2}}}}\n");
  test::TempDir dir;
  const Environment env = training_environment(s, job_paths(dir.path(), "sdk"));
  EXPECT_EQ(env.at("SM_HP_MP_PARAMETERS"), R"({"pipeline_parallel_degree":2})");
  EXPECT_EQ(json::parse(env.at("HEFT_DISTRIBUTION"))["modelparallel"]["parameters"]["partitions"], 2);
}

TEST(SpecSdk, InputConfigFilesPerHost) {
  test::TempDir data;
  const JobSpec s = parsed(kBase + "cluster: {instance_count: 2}\n"
                           "hyperparameters: {epochs: 2, model: cnn, amp: true}\n"
                           "inputs: {train: " + data.path() + "}\n");
  test::TempDir home;
  const JobPaths paths = job_paths(home.path(), "sdk");
  ASSERT_TRUE(make_job_dirs(paths).ok());
  ASSERT_TRUE(write_input_config(s, paths).ok());
  for (const std::string host : {"algo-1", "algo-2"}) {
    const std::string dir = paths.input_config_dir(host);
    EXPECT_EQ(dir, home.path() + "/jobs/sdk/input/" + host + "/config");
    EXPECT_EQ(json::parse(test::read_file(dir + "/hyperparameters.json")),
              json({{"epochs", "2"}, {"model", "\"cnn\""}, {"amp", "true"}}));
    EXPECT_EQ(json::parse(test::read_file(dir + "/inputdataconfig.json")),
              json({{"train", {{"TrainingInputMode", "File"},
                               {"S3DistributionType", "FullyReplicated"},
                               {"RecordWrapperType", "None"}}}}));
    const json rc = json::parse(test::read_file(dir + "/resourceconfig.json"));
    EXPECT_EQ(rc["current_host"], host);
    EXPECT_EQ(rc["hosts"], json({"algo-1", "algo-2"}));
    EXPECT_EQ(std::filesystem::read_symlink(paths.input_dir(host) + "/data/train"), data.path());
  }
}

}  // namespace
}  // namespace heft::job
