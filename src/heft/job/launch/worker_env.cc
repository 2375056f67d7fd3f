// Builds each worker's environment (worker_env.h). The table of variables is docs/run.md;
// keep the two in step.
#include "heft/job/launch/worker_env.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "heft/error.h"
#include "heft/host/host.h"

extern char** environ;

namespace heft::job {

namespace {

void require_at_least(const char* field, int value, int minimum) {
  if (value < minimum)
    throw InvalidArgument("worker environment: " + std::string(field) + " must be at least " +
                          std::to_string(minimum) + ", found " + std::to_string(value));
}

std::string hosts_json(int hosts) {
  nlohmann::json list = nlohmann::json::array();
  for (int h = 0; h < hosts; ++h) list.push_back(host_name(h));
  return list.dump();
}

using nlohmann::json;

constexpr const char* kGroup = "homogeneousCluster";
constexpr const char* kInstanceType = "local";
// The toolkit's framework parameters that make a job distributed (its distribution groups).
const std::vector<std::string> kDistributedFlags = {
    "sagemaker_mpi_enabled", "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled", "sagemaker_torch_distributed_enabled"};

std::string get(const Environment& env, const std::string& name, const std::string& fallback = "") {
  const auto it = env.find(name);
  return it == env.end() ? fallback : it->second;
}

// A variable holding JSON (the job's own), or `fallback` when absent or not JSON.
json get_json(const Environment& env, const std::string& name, json fallback) {
  const auto it = env.find(name);
  if (it == env.end()) return fallback;
  json v = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  return v.is_discarded() ? fallback : v;
}

int get_int(const Environment& env, const std::string& name, int fallback) {
  try {
    return std::stoi(get(env, name, std::to_string(fallback)));
  } catch (const std::exception&) {
    return fallback;
  }
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

// SM_TRAINING_ENV's fields that describe the hosts and their groups.
void add_host_fields(json& t, const json& hosts, const std::string& current, bool distributed,
                     const std::string& instance_type) {
  const json group = {{"instance_group_name", kGroup}, {"instance_type", instance_type},
                      {"hosts", hosts}};
  const json distribution_hosts = distributed ? hosts : json::array();
  t["hosts"] = hosts;
  t["current_host"] = current;
  t["current_instance_type"] = instance_type;
  t["current_instance_group"] = kGroup;
  t["current_instance_group_hosts"] = hosts;
  t["instance_groups"] = json::array({kGroup});
  t["instance_groups_dict"] = {{kGroup, group}};
  t["distribution_instance_groups"] = distributed ? json::array({kGroup}) : json::array();
  t["distribution_hosts"] = distribution_hosts;
  t["is_hetero"] = false;
  t["master_hostname"] = distributed ? distribution_hosts[0] : hosts[0];
  t["is_master"] = t["master_hostname"] == current;
}

}  // namespace

std::string interface_holding(const std::string& address) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* a = list; a && name.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (::inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf)) && address == buf) name = a->ifa_name;
  }
  ::freeifaddrs(list);
  return name;
}

json resource_config(const std::vector<std::string>& hosts, const std::string& current_host,
                     const std::string& network_interface, const std::string& instance_type) {
  return {{"current_host", current_host},
          {"current_instance_type", instance_type},
          {"current_group_name", kGroup},
          {"hosts", hosts},
          {"instance_groups",
           json::array({{{"instance_group_name", kGroup},
                         {"instance_type", instance_type},
                         {"hosts", hosts}}})},
          {"network_interface_name", network_interface}};
}

std::string network_interface_name(const Environment& env) {
  const std::string gloo = get(env, "GLOO_SOCKET_IFNAME");
  if (!gloo.empty()) return gloo;
  const std::string held = interface_holding(get(env, "MASTER_ADDR"));
  return held.empty() ? "eth0" : held;
}

void add_training_toolkit_environment(Environment& env) {
  if (env.count("SM_HPS") == 0) return;
  const std::string current = get(env, "SM_CURRENT_HOST", "algo-1");
  json hosts = get_json(env, "SM_HOSTS", json::array({current}));
  bool names = hosts.is_array() && !hosts.empty();
  for (const json& h : hosts) names = names && h.is_string();
  if (!names) hosts = json::array({current});
  const std::string iface = network_interface_name(env);
  // The spec's cluster.instance_type (heft train sets it), else "local".
  const std::string instance_type = get(env, "SM_CURRENT_INSTANCE_TYPE", kInstanceType);
  const json resources =
      resource_config(hosts.get<std::vector<std::string>>(), current, iface, instance_type);
  const json framework = get_json(env, "SM_FRAMEWORK_PARAMS", json::object());
  bool distributed = false;
  for (const std::string& flag : kDistributedFlags)
    distributed = distributed || framework.value(flag, false);
  const std::string job_dir = contract::HeftVariables::read(env).job_dir.value_or("");
  const std::string input_dir = job_dir.empty() ? "" : job_dir + "/input/" + current;
  json channels = json::object();
  for (const json& c : get_json(env, "SM_CHANNELS", json::array()))
    if (c.is_string()) channels[c.get<std::string>()] = get(env, "SM_CHANNEL_" + upper(c));
  const std::string mp = get(env, "SM_HP_MP_PARAMETERS");

  json t = json::object();
  add_host_fields(t, hosts, current, distributed, instance_type);
  t["additional_framework_parameters"] = framework;
  t["channel_input_dirs"] = channels;
  t["framework_module"] = nullptr;
  t["hyperparameters"] = get_json(env, "SM_HPS", json::object());
  t["input_dir"] = input_dir;
  t["input_config_dir"] = input_dir.empty() ? "" : input_dir + "/config";
  t["input_data_config"] = get_json(env, "SM_INPUT_DATA_CONFIG", json::object());
  t["is_modelparallel_enabled"] = !mp.empty() && mp != "{}";
  t["job_name"] = get(env, "TRAINING_JOB_NAME");
  t["log_level"] = get_int(env, "SM_LOG_LEVEL", 20);
  t["model_dir"] = get(env, "SM_MODEL_DIR");
  t["module_dir"] = get(env, "SM_MODULE_DIR");
  t["module_name"] = get(env, "SM_MODULE_NAME");
  t["network_interface_name"] = iface;
  t["num_cpus"] = get_int(env, "SM_NUM_CPUS", 1);
  t["num_gpus"] = get_int(env, "SM_NUM_GPUS", 0);
  t["num_neurons"] = 0;
  t["output_data_dir"] = get(env, "SM_OUTPUT_DATA_DIR");
  t["output_dir"] = get(env, "SM_OUTPUT_DIR");
  t["output_intermediate_dir"] = get(env, "SM_OUTPUT_INTERMEDIATE_DIR");
  t["resource_config"] = resources;
  t["user_entry_point"] = get(env, "SM_USER_ENTRY_POINT");

  env["SM_RESOURCE_CONFIG"] = resources.dump();
  env["SM_NETWORK_INTERFACE_NAME"] = iface;
  env["SM_INPUT_DIR"] = t["input_dir"].get<std::string>();
  env["SM_INPUT_CONFIG_DIR"] = t["input_config_dir"].get<std::string>();
  env["SM_CURRENT_INSTANCE_TYPE"] = instance_type;
  env["SM_CURRENT_INSTANCE_GROUP"] = kGroup;
  env["SM_CURRENT_INSTANCE_GROUP_HOSTS"] = t["current_instance_group_hosts"].dump();
  env["SM_INSTANCE_GROUPS"] = t["instance_groups"].dump();
  env["SM_INSTANCE_GROUPS_DICT"] = t["instance_groups_dict"].dump();
  env["SM_DISTRIBUTION_INSTANCE_GROUPS"] = t["distribution_instance_groups"].dump();
  env["SM_IS_HETERO"] = "false";
  env["SM_TRAINING_ENV"] = t.dump();
}

Status write_host_input_config(const Environment& env) {
  namespace fs = std::filesystem;
  const std::string dir = get(env, "SM_INPUT_CONFIG_DIR");
  if (dir.empty()) return Status::success();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::failure("cannot create " + dir + ": " + ec.message());
  json hyperparameters = json::object();
  const json hps = get_json(env, "SM_HPS", json::object());
  const json framework = get_json(env, "SM_FRAMEWORK_PARAMS", json::object());
  for (const json* part : {&hps, &framework})
    for (const auto& [name, value] : part->items()) hyperparameters[name] = value.dump();
  const std::string unique = "." + std::to_string(::getpid()) + ".tmp";
  for (const auto& [file, value] :
       {std::pair<const char*, json>{"hyperparameters.json", hyperparameters},
        {"inputdataconfig.json", get_json(env, "SM_INPUT_DATA_CONFIG", json::object())},
        {"resourceconfig.json", get_json(env, "SM_RESOURCE_CONFIG", json::object())}}) {
    const std::string path = dir + "/" + file;
    std::ofstream out(path + unique, std::ios::trunc);
    out << value.dump() << "\n";
    out.close();
    fs::rename(path + unique, path, ec);
    if (!out || ec) return Status::failure("cannot write " + path);
  }
  const fs::path data = fs::path(get(env, "SM_INPUT_DIR", dir + "/..")) / "data";
  for (const json& c : get_json(env, "SM_CHANNELS", json::array())) {
    if (!c.is_string()) continue;
    fs::create_directories(data, ec);
    const fs::path link = data / c.get<std::string>();
    if (!fs::exists(fs::symlink_status(link, ec)))
      fs::create_directory_symlink(get(env, "SM_CHANNEL_" + upper(c)), link, ec);
  }
  return Status::success();
}

std::string host_name(int host_index) { return "algo-" + std::to_string(host_index + 1); }

Environment worker_environment(const JobEnvironment& job, int rank, const Environment& parent) {
  require_at_least("hosts", job.hosts, 1);
  require_at_least("processes_per_host", job.processes_per_host, 1);
  require_at_least("timeout_s", job.timeout_s, 1);
  require_at_least("num_cpus", job.num_cpus, 1);
  require_at_least("restart_count", job.restart_count, 0);
  const int world = job.hosts * job.processes_per_host;
  if (rank < 0 || rank >= world)
    throw InvalidArgument("worker environment: rank " + std::to_string(rank) +
                          " outside the world of " + std::to_string(world) + " ranks");
  const int host = rank / job.processes_per_host;
  const std::string host_id = host_name(host);

  Environment env = parent;
  // torchrun
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(rank % job.processes_per_host);
  env["WORLD_SIZE"] = std::to_string(world);
  env["LOCAL_WORLD_SIZE"] = std::to_string(job.processes_per_host);
  env["GROUP_RANK"] = std::to_string(host);
  env["MASTER_ADDR"] = job.master_addr;
  env["MASTER_PORT"] = std::to_string(job.master_port);
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.restart_count);
  // the cloud training container
  env["SM_HOSTS"] = hosts_json(job.hosts);
  env["SM_CURRENT_HOST"] = host_id;
  env["SM_NUM_CPUS"] = std::to_string(job.num_cpus);
  env["SM_NUM_GPUS"] = std::to_string(job.num_gpus);
  // heft
  contract::HeftVariables heft;
  heft.store = job.store_address;
  heft.token = job.token;
  heft.timeout_s = job.timeout_s;
  heft.host = host_id;
  heft.write(env);
  // A user's own OMP_NUM_THREADS wins; otherwise split the cores between the workers that
  // share them: the simulated hosts of the local launcher all run on this machine, so that
  // is every worker (2 hosts x 1 worker on 2 cores: 1 thread each, not 2).
  if (parent.count("OMP_NUM_THREADS") == 0)
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, job.num_cpus / world));

  for (const auto& [name, value] : job.extra) env[name] = value;
  if (!job.python_path.empty()) {
    const auto it = env.find("PYTHONPATH");
    const bool has = it != env.end() && !it->second.empty();
    env["PYTHONPATH"] = has ? job.python_path + ":" + it->second : job.python_path;
  }
  add_training_toolkit_environment(env);
  return env;
}

Environment current_environment() {
  Environment env;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text(*entry);
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(text.substr(0, eq), text.substr(eq + 1));  // first definition wins, as getenv
  }
  return env;
}

int available_cpus() { return host::available_cpus(); }
int visible_gpus() { return host::visible_gpus(); }

std::vector<std::string> to_envp(const Environment& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [name, value] : env) out.push_back(name + "=" + value);
  return out;
}

}  // namespace heft::job
