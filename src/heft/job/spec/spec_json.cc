// The job spec as JSON and back (spec.h): the form the job database keeps and `heft
// describe --json` shows, every field with its value; `heft resume` reads it again through
// parse_spec (JSON is YAML), so a recorded spec is validated as a new one is.
#include <nlohmann/json.hpp>

#include "heft/job/spec/spec.h"

namespace heft::job {

namespace {

// spec_to_json's output as spec input: it writes every field with its value, defaults
// included, and the spot block's defaults are not valid input while spot is off (they are
// the absence of the block).
nlohmann::json as_input(nlohmann::json spec) {
  if (spec.contains("spot")) {
    nlohmann::json& spot = spec["spot"];
    if (!spot.value("enabled", false)) {
      spec.erase("spot");
    } else {
      if (spot.value("max_wait_s", 0.0) <= 0) spot.erase("max_wait_s");
      if (spot.contains("simulate") && spot["simulate"].value("count", 0) == 0)
        spot.erase("simulate");
    }
  }
  return spec;
}

}  // namespace

nlohmann::json spec_to_json(const JobSpec& spec) {
  using nlohmann::json;
  json hps = json::object();
  for (const auto& [k, hp] : spec.hyperparameters) hps[k] = hp.value;
  json metrics = json::array();
  for (const auto& m : spec.metric_definitions)
    metrics.push_back({{"name", m.name}, {"regex", m.regex}});
  json j = {
      {"name", spec.name},
      {"entry_point", spec.entry_point},
      {"hyperparameters", hps},
      {"inputs", spec.inputs},
      {"cluster",
       {{"instance_count", spec.cluster.instance_count},
        {"processes_per_host", spec.cluster.processes_per_host},
        {"launcher", spec.cluster.launcher}}},
      {"distribution", spec.distribution},
      {"metric_definitions", metrics},
      {"checkpoint",
       {{"every_steps", spec.checkpoint.every_steps}, {"keep", spec.checkpoint.keep}}},
      {"stopping",
       {{"max_runtime_s", spec.stopping.max_runtime_s},
        {"grace_s", spec.stopping.grace_s},
        {"timeout_s", spec.stopping.timeout_s},
        {"straggler_grace_s", spec.stopping.straggler_grace_s}}},
      {"retry", {{"max_attempts", spec.retry.max_attempts}, {"in_place", spec.retry.in_place}}},
      {"spot",
       {{"enabled", spec.spot.enabled},
        {"max_wait_s", spec.spot.max_wait_s},
        {"simulate",
         {{"every_s", spec.spot.simulate_every_s}, {"count", spec.spot.simulate_count}}}}},
      {"environment", spec.environment},
      {"profiler",
       {{"enabled", spec.profiler.enabled}, {"interval_s", spec.profiler.interval_s}}}};
  if (spec.cluster.launcher == "slurm" && !spec.cluster.srun_options.empty())
    j["cluster"]["srun_options"] = spec.cluster.srun_options;
  if (spec.cluster.launcher == "slurm" && !spec.cluster.sbatch_options.empty())
    j["cluster"]["sbatch_options"] = spec.cluster.sbatch_options;
  if (spec.cluster.instance_type != "local")
    j["cluster"]["instance_type"] = spec.cluster.instance_type;
  if (!spec.cluster.store_address.empty())
    j["cluster"]["store_address"] = spec.cluster.store_address;
  if (spec.cluster.launcher == "mpirun") {
    j["cluster"]["hosts"] = spec.cluster.hosts;  // the hostfile as read when the job began
    if (!spec.cluster.custom_mpi_options.empty())
      j["cluster"]["custom_mpi_options"] = spec.cluster.custom_mpi_options;
  }
  json rules = json::array();
  for (const RuleSpec& r : spec.rules) {
    json action = r.stop ? "stop" : "none";
    if (r.notify.any()) {
      json notify = {{"timeout_s", r.notify.timeout_s}};
      if (!r.notify.exec.empty()) notify["exec"] = r.notify.exec;
      if (!r.notify.url.empty()) notify["url"] = r.notify.url;
      action = {{"stop", r.stop}, {"notify", notify}};
    }
    rules.push_back({{"rule", r.rule}, {"parameters", r.parameters}, {"action", action}});
  }
  j["rules"] = rules;
  return j;
}

nlohmann::json normalized_spec_json(const JobSpec& spec) {
  nlohmann::json j = as_input(spec_to_json(spec));
  j["distribution"] = spec.distribution_normalized;
  if (!spec.base_name.empty() && spec.name.empty()) {
    j.erase("name");
    j["base_name"] = spec.base_name;
  }
  return j;
}

Result<JobSpec> spec_from_json(const nlohmann::json& recorded, const std::string& source) {
  return parse_spec(as_input(recorded).dump(), source, {});  // JSON is YAML
}

}  // namespace heft::job
