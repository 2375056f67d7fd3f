// The cloud SDK's distribution dicts and the model-parallel library's parameter names
// (sdk_distribution.h).
#include "heft/config/sdk_distribution.h"

#include <algorithm>
#include <cmath>

#include "heft/config/nearest.h"

namespace heft::config {

namespace {

using nlohmann::json;

const std::vector<std::string> kTopKeys = {"dataparallel", "modelparallel", "smdistributed",
                                           "mpi",          "torch_distributed", "pytorchddp"};
const std::vector<std::string> kSmdistributedKeys = {"dataparallel", "modelparallel"};
const std::vector<std::string> kSmddpKeys = {"enabled", "custom_mpi_options"};
const std::vector<std::string> kMpiKeys = {"enabled", "processes_per_host", "custom_mpi_options"};
const std::vector<std::string> kEnabledOnly = {"enabled"};
constexpr int kMaxProcessesPerHost = 1024;

const char* kOffloading = "heft has no activation offloading (activation_checkpointing: true "
                          "recomputes activations instead of keeping them)";
const char* kSdp = "a setting of the library's own sharded data parallelism, which heft's "
                   "(sharded_data_parallel_degree: parameters, gradients and optimizer state "
                   "sharded, ZeRO-3) does not have";
const char* kFp16 = "heft-train computes in float32 or bfloat16, not float16 (use bf16: true)";

std::string found(const json& v) {
  return v.is_string() ? "'" + v.get<std::string>() + "'" : v.dump();
}

std::string listed(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
  return all;
}

void unknown_keys(const json& map, const std::string& path, const std::vector<std::string>& known,
                  std::vector<std::string>* errors) {
  for (const auto& [key, value] : map.items()) {
    (void)value;
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string best = nearest(key, known);
    errors->push_back(path + "." + key + ": " +
                      (best.empty() ? "unknown field (expected one of " + listed(known) + ")"
                                    : "unknown field; did you mean '" + best + "'?"));
  }
}

// The dict at block[key] as a map with `known` keys, and its `enabled` (false when absent).
bool enabled_dict(const json& parent, const std::string& key, const std::string& path,
                  const std::vector<std::string>& known, std::vector<std::string>* errors) {
  const json& d = parent[key];
  if (!d.is_object()) {
    errors->push_back(path + ": expected a map such as {enabled: true}, found " + found(d));
    return false;
  }
  unknown_keys(d, path, known, errors);
  if (!d.contains("enabled")) return false;
  if (d["enabled"].is_boolean()) return d["enabled"].get<bool>();
  errors->push_back(path + ".enabled: expected true or false, found " + found(d["enabled"]));
  return false;
}

// custom_mpi_options of the dict at `path` (enabled or not), kept in `launch`.
void custom_mpi_options(const json& d, bool enabled, const std::string& path, SdkLaunch& launch,
                        std::vector<std::string>* errors) {
  if (!d.contains("custom_mpi_options")) return;
  const std::string field = path + ".custom_mpi_options";
  const json& v = d["custom_mpi_options"];
  if (!v.is_string()) return errors->push_back(field + ": expected a string, found " + found(v));
  if (!enabled) return errors->push_back(field + ": applies with enabled: true only");
  if (v.get<std::string>().empty()) return;
  if (!launch.custom_mpi_options.empty() && launch.custom_mpi_options != v.get<std::string>())
    return errors->push_back(field + ": differs from " + launch.custom_mpi_options_field +
                             " ('" + launch.custom_mpi_options + "'); give the options once");
  launch.custom_mpi_options = v.get<std::string>();
  launch.custom_mpi_options_field = field;
}

void read_mpi(const json& block, SdkTranslation& t, std::vector<std::string>* errors) {
  const std::string path = "distribution.mpi";
  const bool enabled = enabled_dict(block, "mpi", path, kMpiKeys, errors);
  if (!block["mpi"].is_object()) return;
  const json& d = block["mpi"];
  if (enabled) t.launch.dicts.push_back("mpi");
  if (d.contains("processes_per_host")) {
    const json& v = d["processes_per_host"];
    const bool whole = v.is_number_integer() ||
                       (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!whole || v.get<double>() < 1 || v.get<double>() > kMaxProcessesPerHost)
      errors->push_back(path + ".processes_per_host: expected an integer from 1 to " +
                        std::to_string(kMaxProcessesPerHost) + ", found " + found(v));
    else if (!enabled)
      errors->push_back(path + ".processes_per_host: applies with enabled: true only");
    else
      t.launch.processes_per_host = static_cast<int>(v.get<double>());
  }
  custom_mpi_options(d, enabled, path, t.launch, errors);
}

void read_smdistributed(const json& block, SdkTranslation& t, std::vector<std::string>* errors) {
  const std::string path = "distribution.smdistributed";
  const json& s = block["smdistributed"];
  if (!s.is_object())
    return errors->push_back(path + ": expected a map of dataparallel and modelparallel, found " +
                             found(s));
  unknown_keys(s, path, kSmdistributedKeys, errors);
  if (s.contains("dataparallel")) {
    const std::string dp = path + ".dataparallel";
    if (block.contains("dataparallel"))
      errors->push_back(dp + ": given twice (also distribution.dataparallel); give one");
    const bool enabled = enabled_dict(s, "dataparallel", dp, kSmddpKeys, errors);
    if (enabled) {
      t.dataparallel = true;
      t.launch.dicts.push_back("smdistributed.dataparallel");
    }
    if (s["dataparallel"].is_object())
      custom_mpi_options(s["dataparallel"], enabled, dp, t.launch, errors);
  }
  if (s.contains("modelparallel")) {
    const std::string mp = path + ".modelparallel";
    if (block.contains("modelparallel"))
      return errors->push_back(mp + ": given twice (also distribution.modelparallel); give one");
    t.block["modelparallel"] = s["modelparallel"];  // read by distribution.cc, named by mp
    t.modelparallel_field = mp;
    const json& m = s["modelparallel"];
    if (m.is_object() && m.value("enabled", json(false)) == json(true)) {
      t.launch.dicts.push_back("smdistributed.modelparallel");
      t.launch.mp_parameters = m.contains("parameters") ? m["parameters"] : json::object();
    }
  }
}

}  // namespace

bool SdkLaunch::given(const std::string& dict) const {
  return std::find(dicts.begin(), dicts.end(), dict) != dicts.end();
}

json SdkLaunch::framework_parameters(int processes) const {
  json p = json::object();
  if (given("smdistributed.dataparallel")) {
    p["sagemaker_distributed_dataparallel_enabled"] = true;
    p["sagemaker_distributed_dataparallel_custom_mpi_options"] = custom_mpi_options;
  }
  if (given("mpi")) {
    p["sagemaker_mpi_enabled"] = true;
    p["sagemaker_mpi_num_of_processes_per_host"] = processes;
    p["sagemaker_mpi_custom_mpi_options"] = custom_mpi_options;
  }
  if (given("torch_distributed")) p["sagemaker_torch_distributed_enabled"] = true;
  if (given("pytorchddp")) p["sagemaker_pytorch_ddp_enabled"] = true;
  return p;
}

SdkTranslation translate_sdk(const json& block, std::vector<std::string>* errors) {
  SdkTranslation t;
  unknown_keys(block, "distribution", kTopKeys, errors);
  for (const char* own : {"dataparallel", "modelparallel"})
    if (block.contains(own)) t.block[own] = block[own];
  if (block.contains("smdistributed")) read_smdistributed(block, t, errors);
  if (block.contains("mpi")) read_mpi(block, t, errors);
  for (const char* launcher : {"torch_distributed", "pytorchddp"}) {
    if (!block.contains(launcher)) continue;
    if (!enabled_dict(block, launcher, std::string("distribution.") + launcher, kEnabledOnly,
                      errors))
      continue;
    t.dataparallel = true;
    t.launch.dicts.push_back(launcher);
  }
  return t;
}

const std::vector<ParameterRule>& model_parallel_parameter_table() {
  using U = ParameterUse;
  static const std::vector<ParameterRule> table = {
      {"partitions", U::kUsed, ""},
      {"microbatches", U::kUsed, ""},
      {"pipeline", U::kUsed, ""},
      {"optimize", U::kUsed, ""},
      {"memory_weight", U::kUsed, ""},
      {"placement_strategy", U::kUsed, ""},
      {"auto_partition", U::kUsed, ""},
      {"default_partition", U::kUsed, ""},
      {"active_microbatches", U::kUsed, ""},
      {"activation_checkpointing", U::kUsed, ""},
      {"bf16", U::kUsed, ""},
      {"ddp", U::kUsed, ""},
      {"tensor_parallel_degree", U::kUsed, ""},
      {"sharded_data_parallel_degree", U::kUsed, ""},
      {"partition_boundaries", U::kUsed, ""},
      {"virtual_stages", U::kUsed, ""},
      {"pipeline_parallel_degree", U::kAlias, "partitions"},
      {"hybrid_shard_degree", U::kAlias, "sharded_data_parallel_degree"},
      {"context_parallel_degree", U::kRefused,
       "heft has no context parallelism (accepted at 1 only)"},
      {"expert_parallel_degree", U::kRefused,
       "heft has no expert parallelism (accepted at 1 only)"},
      {"ddp_port", U::kRefused, "heft's data parallelism needs no port of its own (its store "
                                "is HEFT_STORE)"},
      {"ddp_dist_backend", U::kRefused, "heft reduces gradients over its own collectives; "
                                        "there is no backend to choose"},
      {"horovod", U::kRefused, "heft has no Horovod; its data parallelism across model "
                               "replicas is DDP over heft's collectives (ddp: true)"},
      {"contiguous", U::kRefused, "a TensorFlow partitioner setting; heft's stages are always "
                                  "contiguous runs of layers"},
      {"fp16", U::kRefused, kFp16},
      {"fp16_params", U::kRefused, kFp16},
      {"shard_optimizer_state", U::kRefused, "heft shards optimizer state together with "
                                             "parameters and gradients: use "
                                             "sharded_data_parallel_degree"},
      {"prescaled_batch", U::kRefused, "heft's tensor parallelism has no prescaled batch"},
      {"skip_tracing", U::kRefused, "heft does not trace the model (auto_partition profiles "
                                    "its layers; partition_boundaries skips that)"},
      {"deterministic_server", U::kRefused, "heft's pipeline has no execution server: every "
                                            "rank runs one fixed schedule"},
      {"offload_activations", U::kRefused, kOffloading},
      {"sm_activation_offloading", U::kRefused, kOffloading},
      {"activation_loading_horizon", U::kRefused, kOffloading},
      {"delayed_parameter_initialization", U::kScript,
       "heft-train builds each rank's model in full before sharding or splitting it"},
      {"sdp_reduce_bucket_size", U::kRefused, kSdp},
      {"sdp_param_persistence_threshold", U::kRefused, kSdp},
      {"sdp_max_live_parameters", U::kRefused, kSdp},
      {"sdp_hierarchical_allgather", U::kRefused, kSdp},
      {"sdp_gradient_clipping", U::kRefused, "use heft-train's grad_clip hyperparameter"},
      {"fsdp_cache_flush_warnings", U::kRefused, "heft's sharding is not PyTorch FSDP; it has "
                                                 "no allocator cache to warn about"},
      {"allow_empty_shards", U::kRefused, "heft's sharding gives every rank of a shard group "
                                          "a shard of each unit"},
      {"random_seed", U::kScript, "use heft-train's seed hyperparameter"},
  };
  return table;
}

void translate_smp_parameters(json& parameters, const std::string& path,
                              std::vector<std::string>* errors) {
  if (!parameters.is_object()) return;
  for (const ParameterRule& rule : model_parallel_parameter_table()) {
    if (rule.use == ParameterUse::kUsed || !parameters.contains(rule.name)) continue;
    json value = parameters[rule.name];
    parameters.erase(rule.name);
    const std::string field = path + "." + rule.name;
    if (rule.use == ParameterUse::kScript) continue;  // SM_HP_MP_PARAMETERS carries it
    if (rule.use == ParameterUse::kRefused) {
      const bool degree = rule.name.size() > 7 && rule.name.substr(rule.name.size() - 7) == "_degree";
      if (!(degree && value == json(1))) errors->push_back(field + ": not supported: " + rule.detail);
      continue;
    }
    if (parameters.contains(rule.detail)) {
      errors->push_back(field + ": given twice (also " + rule.detail + ", heft's name for it); "
                        "give one");
      continue;
    }
    // hybrid_shard_degree 0: the library leaves sharding to the script (no heft sharding).
    if (rule.name == "hybrid_shard_degree" && value == json(0)) value = 1;
    parameters[rule.detail] = value;
  }
}

std::vector<std::string> script_parameters_for_trainer(const json& mp_parameters,
                                                       const std::string& path) {
  std::vector<std::string> errors;
  if (!mp_parameters.is_object()) return errors;
  for (const ParameterRule& rule : model_parallel_parameter_table())
    if (rule.use == ParameterUse::kScript && mp_parameters.contains(rule.name))
      errors.push_back(path + "." + rule.name + ": not supported by heft-train: " + rule.detail +
                       " (a script of your own reads it from SM_HP_MP_PARAMETERS)");
  return errors;
}

}  // namespace heft::config
