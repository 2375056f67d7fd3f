// ctest-labels: unit
// Tests of the job spec (src/heft/job/spec/spec.h): a table of bad specs and the message
// fragments each must produce (field, expectation, what was found, where), the
// nearest-key suggestion, --set overrides, defaults, and the built-in trainer's metrics.
#include "heft/job/spec/spec.h"

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

namespace heft::job {
namespace {

const std::string kGood =
    "name: fashion-cnn\n"
    "entry_point: [python3, train.py]\n"
    "hyperparameters: {epochs: 2, lr: 0.05, model: cnn, amp: false, tag: '7'}\n"
    "cluster: {instance_count: 2, processes_per_host: 3}\n";

TEST(JobSpec, ParsesFieldsAndFillsDefaults) {
  const Result<JobSpec> r = parse_spec(kGood, "spec.yaml");
  ASSERT_TRUE(r.ok()) << r.error();
  const JobSpec& s = r.value();
  EXPECT_EQ(s.name, "fashion-cnn");
  EXPECT_EQ(s.entry_point, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(s.world_size(), 6);
  EXPECT_EQ(s.hyperparameters.at("epochs").value, 2);
  EXPECT_EQ(s.hyperparameters.at("lr").value, 0.05);
  EXPECT_EQ(s.hyperparameters.at("lr").text, "0.05");
  EXPECT_EQ(s.hyperparameters.at("model").value, "cnn");
  EXPECT_EQ(s.hyperparameters.at("amp").value, false);
  EXPECT_EQ(s.hyperparameters.at("tag").value, "7");  // quoted stays a string
  EXPECT_EQ(s.stopping.max_runtime_s, 86400);
  EXPECT_EQ(s.retry.max_attempts, 1);
  EXPECT_FALSE(s.spot.enabled);
  EXPECT_TRUE(s.metric_definitions.empty());  // no defaults for a user's script
  EXPECT_TRUE(s.distribution.is_object());
}

TEST(JobSpec, BuiltinTrainerGetsDefaultMetricsAfterItsOwn) {
  const Result<JobSpec> r = parse_spec(
      "name: a\nentry_point: heft-train\n"
      "metric_definitions: [{name: 'train:loss', regex: 'L=([0-9.]+)'}, {name: x, regex: "
      "'x=(\\d+)'}]\n",
      "s.yaml");
  ASSERT_TRUE(r.ok()) << r.error();
  std::vector<std::string> names;
  for (const auto& d : r.value().metric_definitions) names.push_back(d.name);
  EXPECT_EQ(names, (std::vector<std::string>{"train:loss", "x", "train:throughput",
                                             "train:tokens_per_s", "test:acc",
                                             "validation:loss", "layout:data", "layout:sharded",
                                             "layout:tensor", "layout:pipeline",
                                             "layout:microbatches", "layout:virtual_stages",
                                             "layout:checkpointing", "layout:predicted_step_s",
                                             "layout:calibrated_step_s", "layout:measured_step_s", "layout:trial",
                                             "layout:trials"}));
  EXPECT_EQ(r.value().metric_definitions[0].regex, "L=([0-9.]+)");
}

TEST(JobSpec, BuiltinMetricRegexesMatchTheTrainerLines) {
  std::map<std::string, std::regex> re;
  for (const auto& d : builtin_metric_definitions()) re.emplace(d.name, std::regex(d.regex));
  std::smatch m;
  const std::string step = "step=40 epoch=1 loss=0.6931 lr=0.05 samples_per_s=1.2e3";
  ASSERT_TRUE(std::regex_search(step, m, re.at("train:loss")));
  EXPECT_EQ(m[1], "0.6931");
  ASSERT_TRUE(std::regex_search(step, m, re.at("train:throughput")));
  EXPECT_EQ(m[1], "1.2e3");
  EXPECT_FALSE(std::regex_search(step, m, re.at("test:acc")));
  const std::string epoch = "epoch=1 test_loss=0.41 test_acc=0.853";
  ASSERT_TRUE(std::regex_search(epoch, m, re.at("test:acc")));
  EXPECT_EQ(m[1], "0.853");
  EXPECT_FALSE(std::regex_search(epoch, m, re.at("train:loss")));
  const std::string gpt = "step=40 epoch=1 loss=2.5 lr=0.001 samples_per_s=30 tokens_per_s=3840";
  ASSERT_TRUE(std::regex_search(gpt, m, re.at("train:tokens_per_s")));
  EXPECT_EQ(m[1], "3840");
  EXPECT_FALSE(std::regex_search(gpt, m, re.at("validation:loss")));
  const std::string val = "step=100 val_loss=2.25";
  ASSERT_TRUE(std::regex_search(val, m, re.at("validation:loss")));
  EXPECT_EQ(m[1], "2.25");
  EXPECT_FALSE(std::regex_search(val, m, re.at("train:loss"))) << "val_loss is not loss";
  const std::string layout =
      "layout: data=1 sharded=1 tensor=4 pipeline=1 microbatches=1 virtual_stages=1 checkpointing=0 "
      "predicted_step_s=0.0507 predicted_memory_gb=0.356 memory_limit_gb=8.000 calibrated_step_s=0.0690 "
      "measured_step_s=0.0671 peak_rss_gb=0.394 trial=2 trials=6";
  ASSERT_TRUE(std::regex_search(layout, m, re.at("layout:predicted_step_s")));
  EXPECT_EQ(m[1], "0.0507");
  ASSERT_TRUE(std::regex_search(layout, m, re.at("layout:calibrated_step_s")));
  EXPECT_EQ(m[1], "0.0690");
  ASSERT_TRUE(std::regex_search(layout, m, re.at("layout:measured_step_s")));
  EXPECT_EQ(m[1], "0.0671");
  ASSERT_TRUE(std::regex_search(layout, m, re.at("layout:trial")));
  EXPECT_EQ(m[1], "2");
  const std::string final_line = "final: step=400 loss=0.3 test_acc=0.85 samples_per_s=9 seconds=3";
  for (auto& [name, r] : re) EXPECT_FALSE(std::regex_search(final_line, m, r)) << name;
}

struct BadSpec {
  const char* what;
  std::string yaml;
  std::vector<std::string> fragments;
  std::vector<std::string> overrides = {};
};

const std::string kBase = "name: j\nentry_point: [python3, t.py]\n";

TEST(JobSpec, BadSpecsNameTheFieldWhatWasExpectedAndWhatWasFound) {
  const std::vector<BadSpec> table = {
      {"typo at the top", kBase + "hyperparamters: {lr: 1}\n",
       {"spec.yaml:3: hyperparamters: unknown field; did you mean 'hyperparameters'?"}},
      {"typo inside a section", kBase + "cluster: {instance_cout: 2}\n",
       {"spec.yaml:3: cluster.instance_cout: unknown field; did you mean 'instance_count'?"}},
      {"no near key", kBase + "colour: blue\n",
       {"colour: unknown field; expected one of name, base_name, entry_point,"}},
      {"missing name", "entry_point: heft-train\n", {"name: required", "--name"}},
      {"missing entry point", "name: j\n", {"entry_point: required", "heft-train", "[python3, train.py]"}},
      {"entry point with spaces", "name: j\nentry_point: python3 train.py\n",
       {"entry_point: expected heft-train or a command list", "found 'python3 train.py'", "as a list"}},
      {"bad name", "name: my_job!\nentry_point: heft-train\n",
       {"spec.yaml:1: name: expected letters, digits and '-'", "found 'my_job!'"}},
      {"zero instances", kBase + "cluster:\n  instance_count: 0\n",
       {"spec.yaml:4: cluster.instance_count: expected an integer from 1 to 1024, found 0"}},
      {"word for a count", kBase + "cluster: {processes_per_host: two}\n",
       {"cluster.processes_per_host: expected an integer from 1 to 1024, found 'two'"}},
      {"float for a count", kBase + "retry: {max_attempts: 1.5}\n",
       {"retry.max_attempts: expected an integer from 1 to 30, found 1.5"}},
      {"other launcher", kBase + "cluster: {launcher: kubernetes}\n",
       {"cluster.launcher: expected local, mpirun or slurm", "found 'kubernetes'"}},
      {"mpirun without hosts", kBase + "cluster: {launcher: mpirun}\n",
       {"exactly one of cluster.hosts"}},
      {"hosts without mpirun", kBase + "cluster: {hosts: [a, b]}\n",
       {"cluster.hosts", "needs cluster.launcher: mpirun"}},
      {"srun options without slurm", kBase + "cluster: {srun_options: '-p x'}\n",
       {"cluster.srun_options", "needs cluster.launcher: slurm"}},
      {"sbatch options without slurm", kBase + "cluster: {launcher: mpirun, hosts: [a], sbatch_options: '-p x'}\n",
       {"cluster.sbatch_options", "needs cluster.launcher: slurm"}},
      {"instance type with a space", kBase + "cluster: {instance_type: 'ml c5'}\n",
       {"cluster.instance_type: expected a name of letters, digits", "found 'ml c5'"}},
      {"store address with the local launcher", kBase + "cluster: {store_address: 10.0.0.1}\n",
       {"cluster.store_address", "needs cluster.launcher: mpirun or slurm"}},
      {"negative runtime", kBase + "stopping: {max_runtime_s: -5}\n",
       {"stopping.max_runtime_s: expected a number of seconds > 0, found -5"}},
      {"hyperparameters as a list", kBase + "hyperparameters: [1, 2]\n",
       {"hyperparameters: expected a map, found a list"}},
      {"nested hyperparameter", kBase + "hyperparameters: {opt: {name: sgd}}\n",
       {"hyperparameters.opt: expected a number, string or boolean, found a map"}},
      {"missing input directory", kBase + "inputs: {train: /no/such/dir}\n",
       {"inputs.train: expected an existing directory, found '/no/such/dir'"}},
      {"regex without group", kBase + "metric_definitions: [{name: loss, regex: 'loss=[0-9]+'}]\n",
       {"metric_definitions[0].regex: expected a regular expression with a group"}},
      {"broken regex", kBase + "metric_definitions: [{name: loss, regex: 'loss=([0-9]+'}]\n",
       {"metric_definitions[0].regex: expected a regular expression in RE2 syntax", "(missing ):"}},
      // What needs backtracking cannot run in linear time on worker output: refused.
      {"backreference", kBase + "metric_definitions: [{name: loss, regex: '(a)\\1=([0-9]+)'}]\n",
       {"metric_definitions[0].regex: expected a regular expression in RE2 syntax (no "
        "backreferences or look-around", "invalid escape sequence: \\1"}},
      {"look-ahead", kBase + "metric_definitions: [{name: loss, regex: '(?=loss)loss=([0-9]+)'}]\n",
       {"metric_definitions[0].regex: expected a regular expression in RE2 syntax",
        "invalid perl operator: (?="}},
      {"metric without name", kBase + "metric_definitions: [{regex: 'a=(1)'}]\n",
       {"metric_definitions[0].name: required"}},
      {"duplicate metric", kBase + "metric_definitions: [{name: a, regex: 'a=(1)'}, {name: a, regex: 'b=(1)'}]\n",
       {"metric_definitions[1].name: expected a name not used by another definition"}},
      {"typo in a metric", kBase + "metric_definitions: [{name: a, regexp: 'a=(1)'}]\n",
       {"metric_definitions[0].regexp: unknown field; did you mean 'regex'?"}},
      {"simulate without spot", kBase + "spot: {simulate: {every_s: 5}}\n",
       {"spot.simulate: needs spot.enabled: true"}},
      {"max wait below max runtime",
       kBase + "stopping: {max_runtime_s: 100}\nspot: {enabled: true, max_wait_s: 50}\n",
       {"spot.max_wait_s: expected at least stopping.max_runtime_s (100), found 50"}},
      {"spot enabled not bool", kBase + "spot: {enabled: yes please}\n",
       {"spot.enabled: expected true or false, found 'yes please'"}},
      {"reserved variable", kBase + "environment: {RANK: 3}\n",
       {"environment.RANK: expected a variable heft does not set itself"}},
      {"distribution typo", kBase + "distribution: {dataparalel: {enabled: true}}\n",
       {"distribution.dataparalel: unknown field; did you mean 'dataparallel'?"}},
      {"field given twice", kBase + "stopping: {grace_s: 1}\nretry: {}\nstopping: {max_runtime_s: 5}\n",
       {"spec.yaml:5: stopping: given twice (first on line 3); expected each field once"}},
      {"not a map", "- a\n- b\n", {"spec: expected a map of fields", "found a list"}},
      {"bad yaml", "name: [a\n", {"spec.yaml:", "not valid YAML"}},
      {"bad override value", kBase, {"--set cluster.instance_count: expected an integer from 1 to 1024, found 'many'"},
       {"cluster.instance_count=many"}},
      {"override typo", kBase, {"--set cluster.instance_cout: unknown field; did you mean 'instance_count'?"},
       {"cluster.instance_cout=2"}},
      {"override without =", kBase, {"--set 'cluster': expected key.path=value"}, {"cluster"}},
      {"override into a value", kBase, {"--set name.x: name is a value, not a map"}, {"name.x=1"}},
  };
  for (const BadSpec& bad : table) {
    const Result<JobSpec> r = parse_spec(bad.yaml, "spec.yaml", bad.overrides);
    ASSERT_FALSE(r.ok()) << bad.what;
    for (const std::string& fragment : bad.fragments)
      EXPECT_NE(r.error().find(fragment), std::string::npos)
          << bad.what << ": expected \"" << fragment << "\" in:\n" << r.error();
  }
}

TEST(JobSpec, EveryProblemIsReportedOneALine) {
  const Result<JobSpec> r = parse_spec(
      "name: j\nentry_point: heft-train\ncluster: {instance_count: 0}\nretry: {max_attempts: 0}\n",
      "s.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(),
            "s.yaml:3: cluster.instance_count: expected an integer from 1 to 1024, found 0\n"
            "s.yaml:4: retry.max_attempts: expected an integer from 1 to 30, found 0");
}

TEST(JobSpec, OverridesSetNestedFieldsAndCreateMaps) {
  const Result<JobSpec> r = parse_spec(
      kGood, "spec.yaml",
      {"cluster.instance_count=1", "hyperparameters.lr=0.1", "stopping.max_runtime_s=60",
       "name=other", "spot.enabled=true", "spot.simulate={every_s: 2, count: 3}",
       "entry_point.1=t2.py"});
  ASSERT_TRUE(r.ok()) << r.error();
  const JobSpec& s = r.value();
  EXPECT_EQ(s.name, "other");
  EXPECT_EQ(s.cluster.instance_count, 1);
  EXPECT_EQ(s.cluster.processes_per_host, 3);
  EXPECT_EQ(s.hyperparameters.at("lr").value, 0.1);
  EXPECT_EQ(s.stopping.max_runtime_s, 60);
  EXPECT_EQ(s.spot.simulate_every_s, 2);
  EXPECT_EQ(s.spot.simulate_count, 3);
  EXPECT_EQ(s.spot.max_wait_s, 60);  // defaults to max_runtime_s
  EXPECT_EQ(s.entry_point[1], "t2.py");
}

TEST(JobSpec, InputsBecomeAbsoluteDirectories) {
  const Result<JobSpec> r = parse_spec(kBase + "inputs: {train: /tmp/, test: .}\n", "s.yaml");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r.value().inputs.at("train"), "/tmp/");
  EXPECT_EQ(r.value().inputs.at("test").front(), '/');
}

TEST(JobSpec, MissingFileIsNamed) {
  const Result<JobSpec> r = load_spec("/no/such/spec.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "cannot read the spec '/no/such/spec.yaml': no such file");
}

TEST(JobSpec, NearestKeyUsesEditDistance) {
  EXPECT_EQ(edit_distance("hyperparamters", "hyperparameters"), 1);
  EXPECT_EQ(edit_distance("retyr", "retry"), 1);  // a transposition costs 1
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(nearest("hyperparamters", {"name", "hyperparameters", "inputs"}), "hyperparameters");
  EXPECT_EQ(nearest("colour", {"name", "hyperparameters", "inputs"}), "");
}

TEST(JobSpec, ToJsonKeepsEveryField) {
  const Result<JobSpec> r = parse_spec(kGood, "s.yaml");
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = spec_to_json(r.value());
  EXPECT_EQ(j["cluster"]["processes_per_host"], 3);
  EXPECT_EQ(j["hyperparameters"]["lr"], 0.05);
  EXPECT_EQ(j["stopping"]["max_runtime_s"], 86400);
  EXPECT_EQ(j["spot"]["enabled"], false);
}

}  // namespace
}  // namespace heft::job

namespace heft::job {
namespace {

// `heft resume` reads the spec the database recorded: it must give back the same spec.
TEST(JobSpec, RecordedSpecsReadBackTheSame) {
  const std::vector<std::string> specs = {
      kGood,
      kGood + "spot: {enabled: true, max_wait_s: 600, simulate: {every_s: 0.5, count: 2}}\n"
              "checkpoint: {every_steps: 50}\nstopping: {max_runtime_s: 60, grace_s: 3}\n"
              "retry: {max_attempts: 3}\nenvironment: {A: b}\n"
              "metric_definitions: [{name: loss, regex: 'loss=([0-9.]+)'}]\n",
      "name: builtin\nentry_point: heft-train\nhyperparameters: {model: cnn}\n"
      "distribution: {dataparallel: {enabled: true}}\n",
  };
  for (const std::string& yaml : specs) {
    const Result<JobSpec> first = parse_spec(yaml, "spec.yaml");
    ASSERT_TRUE(first.ok()) << first.error();
    const nlohmann::json recorded = spec_to_json(first.value());
    const Result<JobSpec> again = spec_from_json(recorded, "job 'x'");
    ASSERT_TRUE(again.ok()) << again.error() << "\n" << recorded.dump();
    EXPECT_EQ(spec_to_json(again.value()), recorded);
  }
}

}  // namespace
}  // namespace heft::job

namespace heft::job {
namespace {

// The typed distribution block: each field's bad value is refused naming the field, with
// its line; good values come back typed.
TEST(JobSpec, DistributionFieldsAreTypedAndCheckedOnce) {
  const std::string base = "name: d\nentry_point: [python3, train.py]\n"
                           "cluster: {instance_count: 2, processes_per_host: 4}\n";
  auto mp = [&](const std::string& params) {
    return base + "distribution:\n  modelparallel:\n    enabled: true\n    parameters: {" +
           params + "}\n";
  };
  const std::string p = "distribution.modelparallel.parameters.";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {mp("partitions: 0"), p + "partitions: expected an integer from 1 to 1024, found 0"},
      {mp("partitions: 1.5"), p + "partitions: expected an integer from 1 to 1024, found 1.5"},
      {mp("microbatches: -1"), p + "microbatches: expected an integer from 1 to 65536, found -1"},
      {mp("pipeline: fast"), p + "pipeline: expected simple or interleaved, found 'fast'"},
      {mp("optimize: size"), p + "optimize: expected speed or memory, found 'size'"},
      {mp("memory_weight: 2"), p + "memory_weight: expected a number from 0.0 to 1.0, found 2"},
      {mp("placement_strategy: DPX"), p + "placement_strategy: expected cluster, spread or an "
                                          "order of the letters D, P and T"},
      {mp("auto_partition: 3"), p + "auto_partition: expected true or false, found 3"},
      {mp("partitions: 2, default_partition: 2"),
       p + "default_partition: expected a stage below partitions (2), found 2"},
      {mp("active_microbatches: 0"), p + "active_microbatches: expected an integer from 1"},
      {mp("partitions: 2, auto_partition: false, partition_boundaries: [3, 2]"),
       p + "partition_boundaries: expected a list of ascending layer indices from 1"},
      {mp("partitions: 2, auto_partition: false, partition_boundaries: 3"),
       p + "partition_boundaries: expected a list of ascending layer indices from 1"},
      {mp("partitions: 2, auto_partition: false, partition_boundaries: [2, 4]"),
       p + "partition_boundaries: expected 1 layer indices (one per stage after the first"},
      {mp("partitions: 2, partition_boundaries: [2]"),
       p + "partition_boundaries: applies with auto_partition: false only"},
      {mp("partitions: 2, virtual_stages: 0"), p + "virtual_stages: expected an integer from 1"},
      {mp("partitions: 2, pipeline: simple, virtual_stages: 2"),
       p + "virtual_stages: needs pipeline: interleaved, found pipeline: simple"},
      {mp("activation_checkpointing: yes please"), p + "activation_checkpointing: expected true"},
      {mp("bf16: 1"), p + "bf16: expected true or false, found 1"},
      {mp("ddp: x"), p + "ddp: expected true or false"},
      {mp("tensor_parallel_degree: 0"), p + "tensor_parallel_degree: expected an integer from 1"},
      {mp("sharded_data_parallel_degree: 2000"),
       p + "sharded_data_parallel_degree: expected an integer from 1 to 1024, found 2000"},
      {mp("partitionz: 2"), p + "partitionz: unknown field; did you mean 'partitions'?"},
      {mp("tensor_parallel_degree: 3"),
       "distribution.modelparallel.parameters: tensor_parallel_degree x partitions = 3 must "
       "divide the 8 workers"},
      {mp("tensor_parallel_degree: 2, sharded_data_parallel_degree: 3"),
       p + "sharded_data_parallel_degree: expected a divisor of the data-parallel degree 4"},
      {base + "distribution: {modelparallel: {enabled: maybe}}\n",
       "distribution.modelparallel.enabled: expected true or false, found 'maybe'"},
      {base + "distribution: {dataparallel: []}\n", "distribution.dataparallel: expected a map"},

  };
  for (const auto& [yaml, fragment] : bad) {
    const Result<JobSpec> r = parse_spec(yaml, "spec.yaml");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_NE(r.error().find(fragment), std::string::npos)
        << "expected \"" << fragment << "\" in:\n" << r.error();
    EXPECT_EQ(r.error().rfind("spec.yaml:", 0), 0u) << r.error();  // with its line
  }
  const Result<JobSpec> good =
      parse_spec(mp("partitions: 2, microbatches: 4, pipeline: simple, optimize: memory, "
                    "tensor_parallel_degree: 2, sharded_data_parallel_degree: 2, "
                    "placement_strategy: spread"),
                 "spec.yaml");
  ASSERT_TRUE(good.ok()) << good.error();
  const config::ModelParallel& m = good.value().distribution_config.modelparallel;
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.partitions, 2);
  EXPECT_EQ(m.microbatches, 4);
  EXPECT_EQ(m.pipeline, "simple");
  EXPECT_DOUBLE_EQ(m.memory_weight, 0.8);  // optimize: memory
  EXPECT_EQ(m.active_microbatches, 4);     // partitions + 2
  EXPECT_EQ(m.placement_strategy, "spread");
  EXPECT_EQ(good.value().distribution_config.data_parallel_degree(8), 2);
  const Result<JobSpec> manual = parse_spec(
      mp("partitions: 2, virtual_stages: 2, auto_partition: false, partition_boundaries: [1, 3, 4]"),
      "spec.yaml");
  ASSERT_TRUE(manual.ok()) << manual.error();
  EXPECT_EQ(manual.value().distribution_config.modelparallel.partition_boundaries,
            (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(manual.value().distribution_config.modelparallel.virtual_stages, 2);
  // bf16 without sharding is accepted (it was refused before issue 27).
  const Result<JobSpec> bf16 = parse_spec(
      "name: d\nentry_point: heft-train\ndistribution: {modelparallel: {enabled: true, "
      "parameters: {bf16: true}}}\n",
      "spec.yaml");
  ASSERT_TRUE(bf16.ok()) << bf16.error();
  EXPECT_TRUE(bf16.value().distribution_config.modelparallel.bf16);
}

// heft train checks the distribution heft-train will run: the block with heft-train's
// hyperparameters over it, one rule for each knob wherever it was given.
TEST(JobSpec, TheBuiltinTrainersHyperparametersResolveIntoTheDistribution) {
  const std::string base = "name: d\nentry_point: heft-train\n"
                           "cluster: {instance_count: 2, processes_per_host: 4}\n";
  const Result<JobSpec> bad =
      parse_spec(base + "hyperparameters:\n  tensor_parallel_degree: 3\n", "spec.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "spec.yaml:5: hyperparameters.tensor_parallel_degree: 3 x partitions 1 "
                         "must divide the 8 workers");
  const Result<JobSpec> range =
      parse_spec(base + "hyperparameters: {partitions: 2000}\n", "spec.yaml");
  ASSERT_FALSE(range.ok());
  EXPECT_NE(range.error().find("hyperparameters.partitions: expected an integer from 1 to 1024, "
                               "found 2000"),
            std::string::npos)
      << range.error();
  const Result<JobSpec> good = parse_spec(
      base + "hyperparameters: {partitions: 4, bf16: true}\n"
             "distribution: {modelparallel: {enabled: true, parameters: {partitions: 2, "
             "microbatches: 4}}}\n",
      "spec.yaml");
  ASSERT_TRUE(good.ok()) << good.error();
  const config::ModelParallel& m = good.value().distribution_config.modelparallel;
  EXPECT_EQ(m.partitions, 4);
  EXPECT_EQ(m.microbatches, 4);
  EXPECT_TRUE(m.bf16);
  // Another program's hyperparameters are its own.
  const Result<JobSpec> script = parse_spec(
      "name: d\nentry_point: [python3, train.py]\nhyperparameters: {tensor_parallel_degree: 3}\n"
      "cluster: {instance_count: 2, processes_per_host: 4}\n",
      "spec.yaml");
  EXPECT_TRUE(script.ok()) << script.error();
}

}  // namespace
}  // namespace heft::job
