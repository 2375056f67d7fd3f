// A parsed distribution's JSON form in heft's terms and its fit to a world of ranks
// (Distribution::to_json, data_parallel_degree and check_world; distribution.h).
#include "heft/config/distribution.h"

#include <algorithm>

namespace heft::config {

nlohmann::json Distribution::to_json() const {
  nlohmann::json j = nlohmann::json::object();
  if (dataparallel) j["dataparallel"] = {{"enabled", true}};
  if (!modelparallel.enabled) return j;
  const ModelParallel& m = modelparallel;
  nlohmann::json p = {{"partitions", m.partitions},
                      {"microbatches", m.microbatches},
                      {"pipeline", m.pipeline},
                      {"optimize", m.optimize},
                      {"memory_weight", m.memory_weight},
                      {"placement_strategy", m.placement_strategy},
                      {"auto_partition", m.auto_partition},
                      {"default_partition", m.default_partition},
                      {"virtual_stages", m.virtual_stages},
                      {"activation_checkpointing", m.activation_checkpointing},
                      {"bf16", m.bf16},
                      {"tensor_parallel_degree", m.tensor_parallel_degree},
                      {"sharded_data_parallel_degree", m.sharded_data_parallel_degree}};
  if (m.active_microbatches > 0) p["active_microbatches"] = m.active_microbatches;
  if (m.ddp.has_value()) p["ddp"] = *m.ddp;
  if (!m.partition_boundaries.empty()) p["partition_boundaries"] = m.partition_boundaries;
  if (m.auto_layout) p["auto_layout"] = true;
  if (m.memory_limit_gb > 0) p["memory_limit_gb"] = m.memory_limit_gb;
  if (m.auto_layout_trials != ModelParallel{}.auto_layout_trials) p["auto_layout_trials"] = m.auto_layout_trials;
  j["modelparallel"] = {{"enabled", true}, {"parameters", p}};
  return j;
}

nlohmann::json Distribution::script_parameters() const {
  if (!modelparallel.enabled) return nullptr;
  if (launch.mp_parameters.is_object()) return launch.mp_parameters;
  return to_json()["modelparallel"]["parameters"];
}

int Distribution::data_parallel_degree(int world) const {
  if (!modelparallel.enabled) return world;
  const int mp = modelparallel.tensor_parallel_degree * modelparallel.partitions;
  return mp > 0 && world % mp == 0 ? world / mp : 0;
}

Status Distribution::check_world(int world) const {
  if (!modelparallel.enabled) return Status::success();
  const ModelParallel& m = modelparallel;
  const auto from_hyperparameters = [&](const char* name) {
    return std::find(overridden.begin(), overridden.end(), name) != overridden.end();
  };
  const int mp = m.tensor_parallel_degree * m.partitions;
  const std::string workers = std::to_string(world) + " workers";
  if (world % mp != 0) {
    if (from_hyperparameters("tensor_parallel_degree") || from_hyperparameters("partitions"))
      return Status::failure("hyperparameters.tensor_parallel_degree: " +
                             std::to_string(m.tensor_parallel_degree) + " x partitions " +
                             std::to_string(m.partitions) + " must divide the " + workers);
    return Status::failure(parameters_field + ": tensor_parallel_degree x partitions = " +
                           std::to_string(mp) + " must divide the " + workers +
                           " (instance_count x processes_per_host)");
  }
  const int dp = world / mp;
  if (m.ddp == false && dp > 1)
    return Status::failure(parameters_field + ".ddp: false asks for no data parallelism across "
                           "the " + std::to_string(dp) + " model replicas (" + workers +
                           " / tensor_parallel_degree / partitions), but heft always reduces "
                           "their gradients; expected true (or nothing), or a data-parallel "
                           "degree of 1");
  if (dp % m.sharded_data_parallel_degree == 0) return Status::success();
  const std::string expected = "expected a divisor of the data-parallel degree " +
                               std::to_string(dp);
  const std::string sdp = std::to_string(m.sharded_data_parallel_degree);
  if (from_hyperparameters("sharded_data_parallel_degree"))
    return Status::failure("hyperparameters.sharded_data_parallel_degree: " + expected +
                           ", found " + sdp + " (" + workers +
                           " / tensor_parallel_degree / partitions)");
  return Status::failure(parameters_field + ".sharded_data_parallel_degree: " + expected + " (" +
                         workers + " / tensor_parallel_degree / partitions), found " + sdp);
}

}  // namespace heft::config
