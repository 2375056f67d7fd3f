// Reading and validating a job spec (spec.h). The YAML tree is walked once, field by field;
// each problem is appended to a list instead of stopping at the first, so one run of
// `heft train` shows everything wrong with a spec. A message reads
//   "<where> <path>: expected <what>, found <what>"
// where <where> is "file:line:" for a field from the file and "--set" for one an override
// put there, and <path> is dotted with list indices in brackets (metric_definitions[1].regex).
// The monitoring blocks (metric_definitions, rules, profiler) are read in
// spec_monitoring.cc, the JSON form of a spec in spec_json.cc.
#include "heft/job/spec/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "heft/config/distribution.h"
#include "heft/contract/worker.h"
#include "heft/job/launch/local_launcher.h"
#include "heft/config/hyperparameters.h"
#include "heft/config/sdk_distribution.h"
#include "heft/job/launch/mpirun_launcher.h"
#include "heft/job/spec/spec_monitoring.h"
#include "heft/job/spec/spec_sdk.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::job {

namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTopKeys = {
    "name",     "base_name", "entry_point", "hyperparameters", "inputs", "cluster",
    "distribution", "metric_definitions", "checkpoint", "stopping", "retry", "spot", "environment",
    "rules", "profiler"};
const std::vector<std::string> kClusterKeys = {"instance_count", "processes_per_host",
                                               "launcher", "hosts", "hostfile",
                                               "custom_mpi_options", "srun_options",
                                               "sbatch_options", "store_address",
                                               "instance_type"};
const std::vector<std::string> kCheckpointKeys = {"every_steps", "keep"};
const std::vector<std::string> kStoppingKeys = {"max_runtime_s", "grace_s", "timeout_s",
                                                "straggler_grace_s"};
const std::vector<std::string> kRetryKeys = {"max_attempts", "in_place"};
const std::vector<std::string> kSpotKeys = {"enabled", "max_wait_s", "simulate"};
const std::vector<std::string> kSimulateKeys = {"every_s", "count"};

constexpr size_t kMaxHyperparameters = 100;
constexpr size_t kMaxHyperparameterName = 256;
constexpr size_t kMaxHyperparameterValue = 2500;
constexpr size_t kMaxEnvironment = 100;
constexpr size_t kMaxEnvironmentValue = 4096;
constexpr size_t kMaxInputs = 20;
constexpr size_t kMaxName = 63;
constexpr int kMaxWorld = kMaxWorkers;

bool is_identifier(const std::string& s, bool allow_dash) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_'))
    return false;
  return std::all_of(s.begin(), s.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || (allow_dash && c == '-');
  });
}

// Job names as the cloud service allows them: letters, digits and single-or-more dashes
// between them, at most 63 characters (they become directory names).
bool is_job_name(const std::string& s) {
  if (s.empty() || s.size() > kMaxName) return false;
  if (!std::isalnum(static_cast<unsigned char>(s.front())) ||
      !std::isalnum(static_cast<unsigned char>(s.back())))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
  });
}

class Validator {
 public:
  Validator(SpecReader& reader, JobSpec& spec) : r_(reader), spec_(spec) {}

  void run(const YAML::Node& root) {
    if (root.IsDefined() && !root.IsNull() && !root.IsMap()) {
      r_.error("", root, "expected a map of fields (name, entry_point, ...), found " +
                             found(root));
      return;
    }
    r_.check_keys(root, "", kTopKeys);
    name(root["name"], root["base_name"]);
    entry_point(root["entry_point"]);
    hyperparameters(root["hyperparameters"]);
    inputs(root["inputs"]);
    cluster(root["cluster"]);
    distribution(root["distribution"], root["hyperparameters"], root["cluster"]);
    read_metric_definitions(r_, root["metric_definitions"], spec_);
    checkpoint(root["checkpoint"]);
    stopping(root["stopping"]);
    retry(root["retry"]);
    spot(root["spot"]);
    environment(root["environment"]);
    read_rules(r_, root["rules"], spec_);
    read_profiler(r_, root["profiler"], spec_);
  }

 private:
  // `name`, or `base_name` (the job is then named base_name-<UTC time> when recorded).
  void name(const YAML::Node& n, const YAML::Node& base) {
    std::string b;
    if (present(base) && r_.get_string(base, "base_name", &b)) {
      if (is_base_name(b))
        spec_.base_name = b;
      else
        r_.error("base_name", base,
                 "expected letters, digits and '-' (not first or last), at most " +
                     std::to_string(kMaxBaseName) + " characters, found " + found(base));
    }
    if (!present(n)) {
      if (!present(base))
        r_.error("name", n, "required (or base_name); expected a job name such as fashion-cnn "
                            "(or give --name)");
      return;
    }
    std::string s;
    if (!r_.get_string(n, "name", &s)) return;
    if (!is_job_name(s)) {
      r_.error("name", n, "expected letters, digits and '-' (not first or last), at most " +
                              std::to_string(kMaxName) + " characters, found " + found(n));
      return;
    }
    spec_.name = s;
  }

  void entry_point(const YAML::Node& n) {
    const std::string expected = "expected heft-train or a command list such as "
                                 "[python3, train.py]";
    if (!present(n)) {
      r_.error("entry_point", n, "required; " + expected);
      return;
    }
    if (n.IsScalar()) {
      const std::string s = n.Scalar();
      if (s.empty() || s.find_first_of(" \t") != std::string::npos) {
        const std::string hint = s.empty() ? "" : " (write a command with arguments as a list)";
        r_.error("entry_point", n, expected + ", found " + found(n) + hint);
        return;
      }
      spec_.entry_point = {s};
      return;
    }
    if (!n.IsSequence() || n.size() == 0) {
      r_.error("entry_point", n, expected + ", found " + (n.IsSequence() ? "an empty list" : found(n)));
      return;
    }
    std::vector<std::string> argv;
    for (size_t i = 0; i < n.size(); ++i) {
      const std::string path = "entry_point[" + std::to_string(i) + "]";
      if (!n[i].IsScalar() || (i == 0 && n[i].Scalar().empty())) {
        r_.error(path, n[i], "expected a " + std::string(i == 0 ? "program name" : "string") +
                                 ", found " + found(n[i]));
        return;
      }
      argv.push_back(n[i].Scalar());
    }
    spec_.entry_point = argv;
  }

  // The managed service's limits: 100 pairs, names up to 256 characters, values up to 2500.
  void hyperparameters(const YAML::Node& n) {
    if (!r_.expect_map(n, "hyperparameters")) return;
    if (n.size() > kMaxHyperparameters) {
      r_.error("hyperparameters", n, "expected at most " + std::to_string(kMaxHyperparameters) +
                                         " entries, found " + std::to_string(n.size()));
      return;
    }
    for (const auto& kv : n) {
      const std::string key = kv.first.as<std::string>();
      const std::string path = "hyperparameters." + shown_key(key);
      if (key.size() > kMaxHyperparameterName || !is_identifier(key, true)) {
        r_.error(path, kv.first, "expected a name of letters, digits, '_' and '-', at most " +
                                     std::to_string(kMaxHyperparameterName) +
                                     " characters, found '" + shown_key(key) + "'");
        continue;
      }
      if (!kv.second.IsScalar()) {
        r_.error(path, kv.second, "expected a number, string or boolean, found " +
                                      found(kv.second));
        continue;
      }
      if (kv.second.Scalar().size() > kMaxHyperparameterValue) {
        r_.error(path, kv.second, "expected a value of at most " +
                                      std::to_string(kMaxHyperparameterValue) +
                                      " characters, found " +
                                      std::to_string(kv.second.Scalar().size()));
        continue;
      }
      spec_.hyperparameters[key] = Hyperparameter{kv.second.Scalar(), scalar_json(kv.second)};
    }
    if (spec_.builtin_trainer()) trainer_hyperparameters(n);
  }

  // heft-train's own table (config/hyperparameters.h), checked here so that a misspelt
  // setting is refused before the job is recorded or a worker starts.
  void trainer_hyperparameters(const YAML::Node& n) {
    bool each_valid = true;
    nlohmann::json sm_hps = nlohmann::json::object();
    for (const auto& [key, hp] : spec_.hyperparameters) {
      if (is_framework_parameter(key)) continue;  // the toolkit's, never given to heft-train
      const std::string text = config::is_hyperparameter(key)
                                   ? config::check_hyperparameter(key, hp.text).error()
                                   : "unknown heft-train setting" +
                                         config::unknown_hyperparameter_text(key).substr(
                                             std::string("unknown").size()) +
                                         " (build/heft-train --help lists them)";
      if (!text.empty()) {
        const YAML::Node at = n[key];
        r_.error("hyperparameters." + key, config::is_hyperparameter(key) ? at : key_node(n, key),
                 text);
        each_valid = false;
      }
      sm_hps[key] = hp.value;
    }
    if (!each_valid) return;
    // Relations between settings (n_head divides n_embd, ...): the trainer's own parse.
    const config::ParsedHyperparameters all = config::parse_hyperparameters({}, sm_hps.dump());
    if (all.ok()) trainer_hp_ = all.value;
    if (!all.ok()) {
      const std::string name = all.error_name.empty() ? "" : "hyperparameters." + all.error_name;
      r_.error(name.empty() ? "hyperparameters" : name,
               all.error_name.empty() ? n : n[all.error_name], all.error_text.empty() ? all.error : all.error_text);
    }
  }

  static YAML::Node key_node(const YAML::Node& map, const std::string& key) {
    for (const auto& kv : map)
      if (kv.first.IsScalar() && kv.first.Scalar() == key) return kv.first;
    return map;
  }

  // A key as messages show it: cut to 64 characters.
  static std::string shown_key(const std::string& key) {
    return key.size() <= 64 ? key : key.substr(0, 64) + "...";
  }

  void inputs(const YAML::Node& n) {
    if (!r_.expect_map(n, "inputs")) return;
    if (n.size() > kMaxInputs) {
      r_.error("inputs", n, "expected at most " + std::to_string(kMaxInputs) +
                                " channels, found " + std::to_string(n.size()));
      return;
    }
    for (const auto& kv : n) {
      const std::string channel = kv.first.as<std::string>();
      const std::string path = "inputs." + shown_key(channel);
      if (channel.size() > kMaxHyperparameterName || !is_identifier(channel, true)) {
        r_.error(path, kv.first, "expected a channel name of letters, digits, '_' and '-', "
                                 "found '" + shown_key(channel) + "'");
        continue;
      }
      std::string dir;
      if (!r_.get_string(kv.second, path, &dir)) continue;
      std::error_code ec;
      const fs::path absolute = fs::absolute(dir, ec);
      if (dir.empty() || ec || !fs::is_directory(absolute, ec)) {
        r_.error(path, kv.second, "expected an existing directory, found " + found(kv.second));
        continue;
      }
      spec_.inputs[channel] = absolute.lexically_normal().string();
    }
  }

  void cluster(const YAML::Node& n) {
    if (!r_.expect_map(n, "cluster")) return;
    r_.check_keys(n, "cluster", kClusterKeys);
    ClusterSpec& c = spec_.cluster;
    r_.get_int(n["instance_count"], "cluster.instance_count", 1, kMaxWorld, &c.instance_count);
    r_.get_int(n["processes_per_host"], "cluster.processes_per_host", 1, kMaxWorld,
               &c.processes_per_host);
    if (present(n["launcher"])) {
      std::string launcher;
      if (r_.get_string(n["launcher"], "cluster.launcher", &launcher)) {
        if (launcher != "local" && launcher != "mpirun" && launcher != "slurm")
          r_.error("cluster.launcher", n["launcher"],
                   "expected local, mpirun or slurm, found " + found(n["launcher"]));
        else
          c.launcher = launcher;
      }
    }
    if (present(n["instance_type"])) {
      std::string type;
      if (r_.get_string(n["instance_type"], "cluster.instance_type", &type)) {
        const bool name = !type.empty() && type.size() <= 64 &&
                          std::all_of(type.begin(), type.end(), [](unsigned char ch) {
                            return std::isalnum(ch) || ch == '.' || ch == '_' || ch == '-';
                          });
        if (!name)
          r_.error("cluster.instance_type", n["instance_type"],
                   "expected a name of letters, digits, '.', '_' and '-' (at most 64), found " +
                       found(n["instance_type"]));
        else
          c.instance_type = type;
      }
    }
    mpirun_fields(n, c);
    for (const auto& [key, into] : {std::pair{"srun_options", &c.srun_options},
                                    std::pair{"sbatch_options", &c.sbatch_options}}) {
      if (!present(n[key])) continue;
      const std::string path = std::string("cluster.") + key;
      if (c.launcher != "slurm") r_.error(path, n[key], "needs cluster.launcher: slurm");
      else r_.get_string(n[key], path, into);
    }
    if (present(n["store_address"])) {
      if (c.launcher == "local")
        r_.error("cluster.store_address", n["store_address"],
                 "needs cluster.launcher: mpirun or slurm (the local launcher's store binds "
                 "127.0.0.1)");
      else
        r_.get_string(n["store_address"], "cluster.store_address", &c.store_address);
    }
    if (static_cast<long>(c.instance_count) * c.processes_per_host > kMaxWorld)
      r_.error("cluster", n, "expected at most " + std::to_string(kMaxWorld) +
                                 " workers (instance_count x processes_per_host), found " +
                                 std::to_string(static_cast<long>(c.instance_count) *
                                                c.processes_per_host));
  }

  void mpirun_fields(const YAML::Node& n, ClusterSpec& c) {
    const bool mpirun = c.launcher == "mpirun";
    for (const char* key : {"hosts", "hostfile", "custom_mpi_options"})
      if (present(n[key]) && !mpirun)
        r_.error(std::string("cluster.") + key, n[key], "needs cluster.launcher: mpirun");
    if (!mpirun) return;
    if (present(n["hosts"]) == present(n["hostfile"])) {
      r_.error("cluster", n, "launcher mpirun needs exactly one of cluster.hosts (a list of host "
                             "names) and cluster.hostfile (a file, one host a line)");
      return;
    }
    if (present(n["hosts"])) {
      const YAML::Node h = n["hosts"];
      if (!h.IsSequence() || h.size() == 0) {
        r_.error("cluster.hosts", h, "expected a list of host names, found " + found(h));
        return;
      }
      for (size_t i = 0; i < h.size(); ++i) {
        std::string name;
        if (r_.get_string(h[i], "cluster.hosts[" + std::to_string(i) + "]", &name))
          c.hosts.push_back(name);
      }
    } else {
      std::string file;
      if (!r_.get_string(n["hostfile"], "cluster.hostfile", &file)) return;
      Result<std::vector<MpiHost>> hosts = read_hostfile(absolute_path(file));
      if (!hosts.ok()) {
        r_.error("cluster.hostfile", n["hostfile"], hosts.error());
        return;
      }
      c.hostfile = absolute_path(file);
      for (const MpiHost& host : hosts.value()) {
        if (host.slots > 0 && c.processes_per_host > host.slots)
          r_.error("cluster.processes_per_host", n["processes_per_host"],
                   "expected at most the " + std::to_string(host.slots) + " slots of host " +
                       host.name + " in " + file + ", found " +
                       std::to_string(c.processes_per_host));
        c.hosts.push_back(host.name);
      }
    }
    if (present(n["instance_count"]) && c.instance_count != static_cast<int>(c.hosts.size()))
      r_.error("cluster.instance_count", n["instance_count"],
               "expected the number of hosts (" + std::to_string(c.hosts.size()) + ") or nothing, found " +
                   std::to_string(c.instance_count));
    c.instance_count = static_cast<int>(c.hosts.size());
    if (present(n["custom_mpi_options"]))
      r_.get_string(n["custom_mpi_options"], "cluster.custom_mpi_options", &c.custom_mpi_options);
  }

  static std::string absolute_path(const std::string& file) {
    std::error_code ec;
    const fs::path p = fs::absolute(file, ec);
    return ec ? file : p.string();
  }

  // The typed block (config/distribution.h) is the one validation, on the distribution
  // heft-train will run: the block (heft's form or the cloud SDK's dicts, whose launch
  // settings go to the cluster: spec_sdk.h) with heft-train's hyperparameters over it
  // (Distribution::with_overrides). Its messages lead with the field, which is found again
  // in the YAML (under distribution, or hyperparameters) for the line number.
  void distribution(const YAML::Node& n, const YAML::Node& hyperparameters,
                    const YAML::Node& cluster) {
    if (present(n)) {
      if (!r_.expect_map(n, "distribution")) return;
      spec_.distribution = yaml_to_json(n);
      if (spec_.distribution.is_null()) spec_.distribution = nlohmann::json::object();
    }
    Result<config::Distribution> d = config::Distribution::parse(spec_.distribution);
    if (d.ok()) {
      spec_.distribution_normalized = d.value().to_json();
      apply_sdk_launch(d.value().launch, n, cluster, r_, spec_);
      d = d.value().with_overrides(trainer_hp_);
    }
    // The library's parameters a script reads itself (random_seed): heft-train reads none.
    if (d.ok() && spec_.builtin_trainer()) {
      std::string refused;
      for (const std::string& e : config::script_parameters_for_trainer(
               d.value().launch.mp_parameters, d.value().parameters_field))
        refused += (refused.empty() ? "" : "\n") + e;
      if (!refused.empty()) d = Result<config::Distribution>::failure(refused);
    }
    Status fits = d.ok() ? d.value().check_world(spec_.world_size()) : Status::failure(d.error());
    if (d.ok()) spec_.distribution_config = d.value();
    if (fits.ok()) return;
    std::stringstream lines(fits.error());
    for (std::string e; std::getline(lines, e);) {
      const size_t colon = e.find(": ");
      const std::string path = e.substr(0, colon);
      const bool hp = path.rfind("hyperparameters.", 0) == 0;
      r_.error(path, field_node(hp ? hyperparameters : n, path), e.substr(colon + 2));
    }
  }

  void checkpoint(const YAML::Node& n) {
    if (!r_.expect_map(n, "checkpoint")) return;
    r_.check_keys(n, "checkpoint", kCheckpointKeys);
    r_.get_int(n["every_steps"], "checkpoint.every_steps", 0, 1 << 30,
               &spec_.checkpoint.every_steps);
    r_.get_int(n["keep"], "checkpoint.keep", 1, 1000, &spec_.checkpoint.keep);
  }

  void stopping(const YAML::Node& n) {
    if (!r_.expect_map(n, "stopping")) return;
    r_.check_keys(n, "stopping", kStoppingKeys);
    r_.get_seconds(n["max_runtime_s"], "stopping.max_runtime_s", false,
                   &spec_.stopping.max_runtime_s);
    r_.get_seconds(n["grace_s"], "stopping.grace_s", true, &spec_.stopping.grace_s);
    r_.get_int(n["timeout_s"], "stopping.timeout_s", 1, 86400, &spec_.stopping.timeout_s);
    r_.get_seconds(n["straggler_grace_s"], "stopping.straggler_grace_s", true,
                   &spec_.stopping.straggler_grace_s);
  }

  void retry(const YAML::Node& n) {
    if (!r_.expect_map(n, "retry")) return;
    r_.check_keys(n, "retry", kRetryKeys);
    r_.get_int(n["max_attempts"], "retry.max_attempts", 1, 30, &spec_.retry.max_attempts);
    if (present(n["in_place"]) && r_.get_bool(n["in_place"], "retry.in_place", &spec_.retry.in_place) &&
        spec_.retry.in_place && spec_.cluster.launcher != "local")
      r_.error("retry.in_place", n["in_place"],
               "needs cluster.launcher: local (under " + spec_.cluster.launcher +
                   " a lost rank still restarts the whole group from its checkpoints: docs/recovery.md)");
    if (spec_.retry.in_place && !(spec_.entry_point.size() == 1 && spec_.entry_point[0] == "heft-train"))
      r_.error("retry.in_place", n["in_place"],
               "needs entry_point: heft-train (a script's ranks do not rejoin a restarted rank: "
               "docs/recovery.md)");
  }

  void spot(const YAML::Node& n) {
    if (!r_.expect_map(n, "spot")) return;
    r_.check_keys(n, "spot", kSpotKeys);
    SpotSpec& s = spec_.spot;
    r_.get_bool(n["enabled"], "spot.enabled", &s.enabled);
    r_.get_seconds(n["max_wait_s"], "spot.max_wait_s", false, &s.max_wait_s);
    const YAML::Node sim = n["simulate"];
    if (present(sim) && r_.expect_map(sim, "spot.simulate")) {
      r_.check_keys(sim, "spot.simulate", kSimulateKeys);
      if (!present(sim["every_s"]))
        r_.error("spot.simulate.every_s", sim, "required; expected seconds after each start "
                                               "at which the group is interrupted");
      r_.get_seconds(sim["every_s"], "spot.simulate.every_s", false, &s.simulate_every_s);
      s.simulate_count = 1;
      r_.get_int(sim["count"], "spot.simulate.count", 0, 1000, &s.simulate_count);
      if (!s.enabled && s.simulate_count > 0)
        r_.error("spot.simulate", sim, "needs spot.enabled: true, found spot.enabled: false");
    }
    if (!present(n["max_wait_s"])) return;
    if (!s.enabled)
      r_.error("spot.max_wait_s", n["max_wait_s"],
               "needs spot.enabled: true, found spot.enabled: false");
  }

  void environment(const YAML::Node& n) {
    if (!r_.expect_map(n, "environment")) return;
    if (n.size() > kMaxEnvironment) {
      r_.error("environment", n, "expected at most " + std::to_string(kMaxEnvironment) +
                                     " variables, found " + std::to_string(n.size()));
      return;
    }
    for (const auto& kv : n) {
      const std::string var = kv.first.as<std::string>();
      const std::string path = "environment." + shown_key(var);
      if (var.size() > kMaxHyperparameterName || !is_identifier(var, false)) {
        r_.error(path, kv.first, "expected a variable name of letters, digits and '_', found '" +
                                     shown_key(var) + "'");
        continue;
      }
      if (contract::reserved(var)) {
        r_.error(path, kv.first, "expected a variable heft does not set itself, found " + var +
                                     " (heft sets it for every worker; see docs/worker-contract.md)");
        continue;
      }
      if (!kv.second.IsScalar()) {
        r_.error(path, kv.second, "expected a string, found " + found(kv.second));
        continue;
      }
      if (kv.second.Scalar().size() > kMaxEnvironmentValue) {
        r_.error(path, kv.second, "expected a value of at most " +
                                      std::to_string(kMaxEnvironmentValue) + " characters, found " +
                                      std::to_string(kv.second.Scalar().size()));
        continue;
      }
      spec_.environment[var] = kv.second.Scalar();
    }
  }

  SpecReader& r_;
  JobSpec& spec_;
  // heft-train's hyperparameters (the built-in trainer's, when valid): those that name a
  // distribution knob override the block.
  config::Hyperparameters trainer_hp_;
};

// Cross-field rules, checked once every field has its value.
void check_relations(SpecReader& r, const YAML::Node& root, JobSpec& spec) {
  SpotSpec& s = spec.spot;
  if (!s.enabled) return;
  if (s.max_wait_s == 0) {
    s.max_wait_s = spec.stopping.max_runtime_s;
  } else if (s.max_wait_s < spec.stopping.max_runtime_s) {
    const YAML::Node spot = root["spot"];
    r.error("spot.max_wait_s", spot["max_wait_s"],
            "expected at least stopping.max_runtime_s (" +
                number_text(spec.stopping.max_runtime_s) + "), found " +
                number_text(s.max_wait_s));
  }
}

}  // namespace

bool is_base_name(const std::string& s) { return is_job_name(s) && s.size() <= kMaxBaseName; }
bool valid_job_name(const std::string& s) { return is_job_name(s); }

std::vector<MetricDefinition> builtin_metric_definitions() {
  // The trainer's lines: "step=N epoch=E loss=L lr=X samples_per_s=S [tokens_per_s=T]",
  // "epoch=E test_loss=L test_acc=A", "step=N val_loss=V" (the GPT) and auto_layout's
  // "layout: ..." lines (train/auto_layout.h); the final summary
  // line is not matched again.
  const std::string number = "([-+]?[0-9]*\\.?[0-9]+(?:[eE][-+]?[0-9]+)?|nan|inf)";
  return {{"train:loss", "^step=[0-9]+ .*\\bloss=" + number},
          {"train:throughput", "^step=[0-9]+ .*\\bsamples_per_s=" + number},
          {"train:tokens_per_s", "^step=[0-9]+ .*\\btokens_per_s=" + number},
          {"test:acc", "^epoch=[0-9]+ .*\\btest_acc=" + number},
          {"validation:loss", "^(?:step|epoch)=[0-9]+ .*\\bval_loss=" + number},
          // auto_layout's "layout: data=D sharded=S ... predicted_step_s=P [measured_step_s=M ...]"
          {"layout:data", "^layout: .*\\bdata=" + number},
          {"layout:sharded", "^layout: .*\\bsharded=" + number},
          {"layout:tensor", "^layout: .*\\btensor=" + number},
          {"layout:pipeline", "^layout: .*\\bpipeline=" + number},
          {"layout:microbatches", "^layout: .*\\bmicrobatches=" + number},
          {"layout:virtual_stages", "^layout: .*\\bvirtual_stages=" + number},
          {"layout:checkpointing", "^layout: .*\\bcheckpointing=" + number},
          {"layout:predicted_step_s", "^layout: .*\\bpredicted_step_s=" + number},
          // the prediction x the layout trials' measured / predicted (train/layout_trials.h)
          {"layout:calibrated_step_s", "^layout: .*\\bcalibrated_step_s=" + number},
          {"layout:measured_step_s", "^layout: .*\\bmeasured_step_s=" + number},
          // layout trials (train/layout_trials.h): the trial that won, of how many; 0 of 0: none
          {"layout:trial", "^layout: .*\\btrial=" + number},
          {"layout:trials", "^layout: .*\\btrials=" + number}};
}

Result<JobSpec> parse_spec(const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) {
  SpecReader reader(source);
  Result<YAML::Node> root = load_spec_document(text, source, overrides, reader);
  if (!root.ok()) return Result<JobSpec>::failure(root.error());
  JobSpec spec;
  try {
    Validator(reader, spec).run(root.value());
    check_relations(reader, root.value(), spec);
  } catch (const YAML::Exception& e) {  // a shape the walk did not expect (a complex key)
    reader.error("", YAML::Node(), "cannot be read: " + e.msg);
  }
  if (reader.has_errors()) return Result<JobSpec>::failure(reader.message());
  return Result<JobSpec>::success(std::move(spec));
}

Result<JobSpec> load_spec(const std::string& path, const std::vector<std::string>& overrides) {
  Result<std::string> text = read_spec_text(path, "the spec");
  if (!text.ok()) return Result<JobSpec>::failure(text.error());
  return parse_spec(text.value(), path, overrides);
}

}  // namespace heft::job
