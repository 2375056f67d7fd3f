// The cloud SDK's `distribution` dicts (the PyTorch estimator's, v2), read verbatim and put in
// heft's terms, so that a spec written by heft.estimator (or copied from a notebook) needs no
// rewriting:
//
//   {smdistributed: {dataparallel: {enabled, custom_mpi_options}}}
//   {smdistributed: {modelparallel: {enabled, parameters: {...}}}, mpi: {enabled,
//    processes_per_host, custom_mpi_options}}
//   {torch_distributed: {enabled}}   {pytorchddp: {enabled}}   {mpi: {...}}
//
// Every key is mapped or refused by name, none is dropped: data-parallel launchers enable
// heft's `dataparallel`, smdistributed.modelparallel is heft's `modelparallel` (its
// parameters through model_parallel_parameter_table(), the model-parallel library's v1 and v2
// names), mpi.processes_per_host becomes cluster.processes_per_host and custom_mpi_options
// cluster.custom_mpi_options (the spec does both, job/spec/spec.cc). What each dict asked for is
// kept (SdkLaunch) for the training toolkit's framework parameters a script sees.
//
// Deliberately left out: launching anything (the spec's launcher starts the workers), and
// heft's own keys (distribution.cc reads those).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace heft::config {

// What the SDK's dicts asked of the launch.
struct SdkLaunch {
  // The dicts given and enabled, in this order: "smdistributed.dataparallel",
  // "smdistributed.modelparallel", "mpi", "torch_distributed", "pytorchddp".
  std::vector<std::string> dicts;
  int processes_per_host = 0;       // mpi.processes_per_host; 0: not given
  std::string custom_mpi_options;   // mpi's or smdistributed.dataparallel's; "": none
  std::string custom_mpi_options_field;  // where it was given ("distribution.mpi.custom_mpi_options")
  nlohmann::json mp_parameters;     // smdistributed.modelparallel.parameters as given; null: none

  bool given(const std::string& dict) const;
  // The training toolkit's additional framework parameters these dicts set
  // (sagemaker_distributed_dataparallel_enabled, sagemaker_mpi_enabled,
  // sagemaker_mpi_num_of_processes_per_host, sagemaker_mpi_custom_mpi_options,
  // sagemaker_torch_distributed_enabled, sagemaker_pytorch_ddp_enabled, ...), with the job's
  // processes per host. An empty object when none was given.
  nlohmann::json framework_parameters(int processes_per_host) const;
};

// The block with the SDK's keys taken out and put in heft's form: `block` holds only
// dataparallel and modelparallel (as heft reads them), `modelparallel_field` is where the
// modelparallel block was written ("distribution.modelparallel" or
// "distribution.smdistributed.modelparallel"), `dataparallel` whether an SDK dict enabled data
// parallelism.
struct SdkTranslation {
  nlohmann::json block = nlohmann::json::object();
  std::string modelparallel_field = "distribution.modelparallel";
  bool dataparallel = false;
  SdkLaunch launch;
};

// Reads the top level of a distribution block (an object): unknown keys (with the nearest
// known one), the SDK's dicts, a strategy given twice. One line per problem into `errors`,
// led by its field.
SdkTranslation translate_sdk(const nlohmann::json& block, std::vector<std::string>* errors);

// The model-parallel library's parameter names and what heft does with each.
enum class ParameterUse {
  kUsed,     // a knob of config::ModelParallel (a test shows each one's effect)
  kAlias,    // another name of a used knob: `detail` is heft's name
  kRefused,  // refused naming it: `detail` says why and what to use instead
  kScript,   // the script's own (heft.torch.sagemaker's tsm.init honours it): not a knob of
             // config::ModelParallel, passed on in SM_HP_MP_PARAMETERS; refused for heft-train
             // (script_parameters_for_trainer), `detail` saying what heft-train takes instead
};
struct ParameterRule {
  std::string name;
  ParameterUse use;
  std::string detail;
};
const std::vector<ParameterRule>& model_parallel_parameter_table();

// In place: aliases renamed to heft's names (pipeline_parallel_degree to partitions,
// hybrid_shard_degree to sharded_data_parallel_degree, 0 meaning 1), refused names removed
// with an error each ("<path>.<name>: <why>"). Degrees of a parallelism heft lacks
// (context_parallel_degree, expert_parallel_degree) are accepted at 1 only.
void translate_smp_parameters(nlohmann::json& parameters, const std::string& path,
                              std::vector<std::string>* errors);

// For heft-train (the built-in trainer), which reads no script parameter: one error line per
// kScript name in the library's parameters as given ("<path>.<name>: not supported by
// heft-train: <detail>"); empty when none.
std::vector<std::string> script_parameters_for_trainer(const nlohmann::json& mp_parameters,
                                                       const std::string& path);

}  // namespace heft::config
