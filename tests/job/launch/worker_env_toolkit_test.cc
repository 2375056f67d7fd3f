// ctest-labels: unit
// The training toolkit's per-host contract in each worker's environment
// (add_training_toolkit_environment, worker_env.h): SM_TRAINING_ENV and SM_RESOURCE_CONFIG as
// the toolkit writes them, per rank of a 2 x 2 job built from a spec (spec_env.h), equal to
// the input config files; nothing of it for `heft run`.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "heft/job/launch/worker_env.h"
#include "heft/job/spec/spec.h"
#include "heft/job/spec/spec_env.h"
#include "support/files.h"

namespace heft::job {
namespace {

using nlohmann::json;

struct Job {
  test::TempDir home;
  test::TempDir data;
  JobSpec spec;
  JobPaths paths;
  JobEnvironment layout;
};

void make(Job& j, const std::string& distribution) {
  const Result<JobSpec> s = parse_spec(
      "name: tk\nentry_point: [python3, -u, train.py]\n"
      "hyperparameters: {epochs: 2, lr: 0.05, model: cnn, amp: true, tag: '7'}\n"
      "inputs: {train: " + j.data.path() + ", test: " + j.data.path() + "}\n"
      "cluster: {instance_count: 2, processes_per_host: 2}\n" + distribution, "s.yaml");
  ASSERT_TRUE(s.ok()) << s.error();
  j.spec = s.value();
  j.paths = job_paths(j.home.path(), "tk");
  j.layout.hosts = 2;
  j.layout.processes_per_host = 2;
  j.layout.num_cpus = 8;
  j.layout.extra = training_environment(j.spec, j.paths);
}

TEST(WorkerToolkitEnvironment, TrainingEnvIsTheToolkitsPerHost) {
  Job j;
  make(j, "distribution: {pytorchddp: {enabled: true}}\n");
  for (int rank : {0, 1, 2, 3}) {
    SCOPED_TRACE(rank);
    const Environment env = worker_environment(j.layout, rank, {});
    const std::string host = rank < 2 ? "algo-1" : "algo-2";
    const json t = json::parse(env.at("SM_TRAINING_ENV"));
    EXPECT_EQ(t["hosts"], json({"algo-1", "algo-2"}));
    EXPECT_EQ(t["current_host"], host);
    EXPECT_EQ(t["is_master"], rank < 2);
    EXPECT_EQ(t["master_hostname"], "algo-1");
    EXPECT_EQ(t["hyperparameters"],
              json({{"epochs", 2}, {"lr", 0.05}, {"model", "cnn"}, {"amp", true}, {"tag", "7"}}));
    EXPECT_EQ(t["channel_input_dirs"], json({{"train", j.data.path()}, {"test", j.data.path()}}));
    EXPECT_EQ(t["input_data_config"]["train"]["TrainingInputMode"], "File");
    EXPECT_EQ(t["additional_framework_parameters"],
              json({{"sagemaker_pytorch_ddp_enabled", true}}));
    EXPECT_EQ(t["distribution_hosts"], json({"algo-1", "algo-2"}));
    EXPECT_EQ(t["num_cpus"], 8);
    EXPECT_EQ(t["num_gpus"], 0);
    EXPECT_EQ(t["network_interface_name"], "lo");
    EXPECT_EQ(t["job_name"], "tk");
    EXPECT_EQ(t["log_level"], 20);
    EXPECT_EQ(t["user_entry_point"], "train.py");
    EXPECT_EQ(t["module_name"], "train");
    EXPECT_EQ(t["model_dir"], j.paths.model);
    EXPECT_EQ(t["output_intermediate_dir"], j.paths.output_intermediate);
    EXPECT_EQ(t["input_dir"], j.paths.input_dir(host));
    EXPECT_EQ(t["input_config_dir"], j.paths.input_config_dir(host));
    EXPECT_EQ(t["is_modelparallel_enabled"], false);
    EXPECT_EQ(env.at("SM_INPUT_CONFIG_DIR"), j.paths.input_config_dir(host));
    EXPECT_EQ(env.at("SM_NETWORK_INTERFACE_NAME"), "lo");
    EXPECT_EQ(env.at("SM_CURRENT_INSTANCE_TYPE"), "local");
    EXPECT_EQ(json::parse(env.at("SM_RESOURCE_CONFIG")), t["resource_config"]);
    EXPECT_EQ(t["resource_config"]["current_host"], host);
    EXPECT_EQ(env.at("SM_USER_ARGS"),
              R"(["--amp","True","--epochs","2","--lr","0.05","--model","cnn","--tag","7"])");
  }
}

TEST(WorkerToolkitEnvironment, TheFilesSayWhatTheEnvironmentSays) {
  Job j;
  make(j, "");
  ASSERT_TRUE(make_job_dirs(j.paths).ok());
  ASSERT_TRUE(write_input_config(j.spec, j.paths).ok());
  const Environment env = worker_environment(j.layout, 3, {});
  const std::string dir = env.at("SM_INPUT_CONFIG_DIR");
  EXPECT_EQ(json::parse(test::read_file(dir + "/resourceconfig.json")),
            json::parse(env.at("SM_RESOURCE_CONFIG")));
  EXPECT_EQ(json::parse(test::read_file(dir + "/inputdataconfig.json")),
            json::parse(env.at("SM_INPUT_DATA_CONFIG")));
  // hyperparameters.json holds strings the toolkit decodes to SM_HPS's typed values.
  json decoded = json::object();
  const json file = json::parse(test::read_file(dir + "/hyperparameters.json"));
  for (const auto& [k, v] : file.items())
    decoded[k] = json::parse(v.get<std::string>());
  EXPECT_EQ(decoded, json::parse(env.at("SM_HPS")));
  // No distribution dict: not distributed in the toolkit's sense; the first host leads.
  const json t = json::parse(env.at("SM_TRAINING_ENV"));
  EXPECT_EQ(t["distribution_hosts"], json::array());
  EXPECT_EQ(t["master_hostname"], "algo-1");
  EXPECT_EQ(t["is_master"], false);
}

TEST(WorkerToolkitEnvironment, ModelParallelIsEnabledForTheScript) {
  Job j;
  make(j, "distribution: {smdistributed: {modelparallel: {enabled: true, parameters: "
          "{partitions: 2, ddp: true}}}, mpi: {enabled: true, processes_per_host: 2}}\n");
  const Environment env = worker_environment(j.layout, 0, {});
  const json t = json::parse(env.at("SM_TRAINING_ENV"));
  EXPECT_EQ(t["is_modelparallel_enabled"], true);
  EXPECT_EQ(t["additional_framework_parameters"],
            json({{"sagemaker_mpi_enabled", true},
                  {"sagemaker_mpi_num_of_processes_per_host", 2},
                  {"sagemaker_mpi_custom_mpi_options", ""}}));
  EXPECT_EQ(env.at("SM_HP_MP_PARAMETERS"), R"({"ddp":true,"partitions":2})");
}

TEST(WorkerToolkitEnvironment, NotATrainingJobNoToolkitVariables) {
  JobEnvironment layout;
  const Environment env = worker_environment(layout, 0, {});
  EXPECT_EQ(env.count("SM_TRAINING_ENV"), 0u);
  EXPECT_EQ(env.count("SM_RESOURCE_CONFIG"), 0u);
  // A worker whose engine set GLOO_SOCKET_IFNAME reports that interface.
  EXPECT_EQ(network_interface_name({{"GLOO_SOCKET_IFNAME", "eth7"}}), "eth7");
  EXPECT_EQ(network_interface_name({{"MASTER_ADDR", "127.0.0.1"}}), "lo");
}

}  // namespace
}  // namespace heft::job
