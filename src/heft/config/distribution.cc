#include "heft/config/distribution.h"

#include <algorithm>
#include <cmath>

#include "heft/config/nearest.h"

namespace heft::config {

namespace {

const std::vector<std::string> kTopKeys = {"dataparallel", "modelparallel"};
const std::vector<std::string> kStrategyKeys = {"enabled", "parameters"};
const std::vector<std::string> kModelParallelKeys = {
    "partitions",         "microbatches",       "pipeline",
    "optimize",           "memory_weight",      "placement_strategy",
    "auto_partition",     "default_partition",  "active_microbatches",
    "activation_checkpointing", "bf16",         "ddp",
    "tensor_parallel_degree",   "sharded_data_parallel_degree", "partition_boundaries",
    "virtual_stages"};
constexpr int kMaxDegree = 1024;

std::string found(const nlohmann::json& v) {
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  return v.dump();
}

class Reader {
 public:
  explicit Reader(std::vector<std::string>* errors) : errors_(errors) {}

  void error(const std::string& path, const std::string& text) {
    errors_->push_back(path + ": " + text);
  }

  // Unknown keys of `map`, each with the nearest known one.
  void keys(const nlohmann::json& map, const std::string& path,
            const std::vector<std::string>& known) {
    for (const auto& [key, value] : map.items()) {
      (void)value;
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      const std::string best = nearest(key, known);
      std::string all;
      for (const std::string& k : known) all += (all.empty() ? "" : ", ") + k;
      error(path + "." + key, best.empty() ? "unknown field (expected one of " + all + ")"
                                           : "unknown field; did you mean '" + best + "'?");
    }
  }

  bool map(const nlohmann::json& v, const std::string& path) {
    if (v.is_object()) return true;
    error(path, "expected a map, found " + found(v));
    return false;
  }

  void boolean(const nlohmann::json& m, const std::string& key, const std::string& path,
               bool* out) {
    if (!m.contains(key)) return;
    if (!m[key].is_boolean()) return error(path + "." + key, "expected true or false, found " + found(m[key]));
    *out = m[key].get<bool>();
  }

  void integer(const nlohmann::json& m, const std::string& key, const std::string& path, int lo,
               int hi, int* out) {
    if (!m.contains(key)) return;
    const nlohmann::json& v = m[key];
    const bool whole = v.is_number_integer() ||
                       (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    const double x = v.is_number() ? v.get<double>() : 0;
    if (!whole || x < lo || x > hi)
      return error(path + "." + key, "expected an integer from " + std::to_string(lo) + " to " +
                                         std::to_string(hi) + ", found " + found(v));
    *out = static_cast<int>(x);
  }

  void number(const nlohmann::json& m, const std::string& key, const std::string& path,
              double lo, double hi, double* out) {
    if (!m.contains(key)) return;
    const nlohmann::json& v = m[key];
    if (!v.is_number() || v.get<double>() < lo || v.get<double>() > hi)
      return error(path + "." + key, "expected a number from " + std::to_string(lo).substr(0, 3) +
                                         " to " + std::to_string(hi).substr(0, 3) + ", found " +
                                         found(v));
    *out = v.get<double>();
  }

  void choice(const nlohmann::json& m, const std::string& key, const std::string& path,
              const std::vector<std::string>& allowed, std::string* out) {
    if (!m.contains(key)) return;
    const nlohmann::json& v = m[key];
    if (v.is_string() &&
        std::find(allowed.begin(), allowed.end(), v.get<std::string>()) != allowed.end()) {
      *out = v.get<std::string>();
      return;
    }
    std::string all;
    for (const std::string& a : allowed) all += (all.empty() ? "" : " or ") + a;
    error(path + "." + key, "expected " + all + ", found " + found(v));
  }

 private:
  std::vector<std::string>* errors_;
};

bool valid_placement(const std::string& p) {
  if (p == "cluster" || p == "spread") return true;
  std::string sorted = p;
  std::sort(sorted.begin(), sorted.end());
  return sorted == "DPT";
}

}  // namespace

Distribution Distribution::parse(const nlohmann::json& block, std::vector<std::string>* errors) {
  Distribution d;
  Reader r(errors);
  const std::string top = "distribution";
  if (block.is_null()) return d;
  if (!r.map(block, top)) return d;
  r.keys(block, top, kTopKeys);
  if (block.contains("dataparallel")) {
    const std::string path = top + ".dataparallel";
    const nlohmann::json& dp = block["dataparallel"];
    if (r.map(dp, path)) {
      r.keys(dp, path, kStrategyKeys);
      r.boolean(dp, "enabled", path, &d.dataparallel);
    }
  }
  if (block.contains("modelparallel")) {
    const std::string path = top + ".modelparallel";
    const nlohmann::json& mp = block["modelparallel"];
    if (r.map(mp, path)) {
      r.keys(mp, path, kStrategyKeys);
      ModelParallel& m = d.modelparallel;
      r.boolean(mp, "enabled", path, &m.enabled);
      const std::string ppath = path + ".parameters";
      if (mp.contains("parameters") && r.map(mp["parameters"], ppath)) {
        const nlohmann::json& p = mp["parameters"];
        r.keys(p, ppath, kModelParallelKeys);
        r.integer(p, "partitions", ppath, 1, kMaxDegree, &m.partitions);
        r.integer(p, "microbatches", ppath, 1, 1 << 16, &m.microbatches);
        r.choice(p, "pipeline", ppath, {"simple", "interleaved"}, &m.pipeline);
        r.choice(p, "optimize", ppath, {"speed", "memory"}, &m.optimize);
        m.memory_weight = m.optimize == "memory" ? 0.8 : 0.2;
        r.number(p, "memory_weight", ppath, 0.0, 1.0, &m.memory_weight);
        if (p.contains("placement_strategy")) {
          const nlohmann::json& v = p["placement_strategy"];
          if (v.is_string() && valid_placement(v.get<std::string>()))
            m.placement_strategy = v.get<std::string>();
          else
            r.error(ppath + ".placement_strategy",
                    "expected cluster, spread or an order of the letters D, P and T (such as "
                    "DTP), found " + found(v));
        }
        r.boolean(p, "auto_partition", ppath, &m.auto_partition);
        r.integer(p, "default_partition", ppath, 0, kMaxDegree - 1, &m.default_partition);
        r.integer(p, "active_microbatches", ppath, 1, 1 << 16, &m.active_microbatches);
        r.boolean(p, "activation_checkpointing", ppath, &m.activation_checkpointing);
        r.boolean(p, "bf16", ppath, &m.bf16);
        r.boolean(p, "ddp", ppath, &m.ddp);
        r.integer(p, "tensor_parallel_degree", ppath, 1, kMaxDegree, &m.tensor_parallel_degree);
        r.integer(p, "sharded_data_parallel_degree", ppath, 1, kMaxDegree,
                  &m.sharded_data_parallel_degree);
        r.integer(p, "virtual_stages", ppath, 1, kMaxDegree, &m.virtual_stages);
        if (p.contains("partition_boundaries")) {
          const nlohmann::json& v = p["partition_boundaries"];
          const std::string bpath = ppath + ".partition_boundaries";
          bool ok = v.is_array();
          for (size_t i = 0; ok && i < v.size(); ++i)
            ok = v[i].is_number_integer() && v[i].get<int>() >= 1 &&
                 (i == 0 || v[i].get<int>() > v[i - 1].get<int>());
          const int want = m.partitions * m.virtual_stages - 1;
          if (!ok)
            r.error(bpath, "expected a list of ascending layer indices from 1 (the first layer "
                           "of each stage after the first, such as [3, 5]), found " + found(v));
          else if (static_cast<int>(v.size()) != want)
            r.error(bpath, "expected " + std::to_string(want) +
                               " layer indices (one per stage after the first: partitions x "
                               "virtual_stages - 1), found " + std::to_string(v.size()));
          else if (m.auto_partition)
            r.error(bpath, "applies with auto_partition: false only (the automatic "
                           "partitioner chooses the boundaries otherwise)");
          else
            m.partition_boundaries = v.get<std::vector<int>>();
        }
        if (m.virtual_stages > 1 && m.pipeline != "interleaved")
          r.error(ppath + ".virtual_stages", "needs pipeline: interleaved, found pipeline: " + m.pipeline);
        if (m.default_partition >= m.partitions && p.contains("default_partition"))
          r.error(ppath + ".default_partition",
                  "expected a stage below partitions (" + std::to_string(m.partitions) +
                      "), found " + std::to_string(m.default_partition));
      }
      if (m.active_microbatches == 0) m.active_microbatches = m.partitions + 2;
    }
  }
  return d;
}

int Distribution::data_parallel_degree(int world) const {
  if (!modelparallel.enabled) return world;
  const int mp = modelparallel.tensor_parallel_degree * modelparallel.partitions;
  return mp > 0 && world % mp == 0 ? world / mp : 0;
}

std::vector<std::string> Distribution::check_world(int world) const {
  std::vector<std::string> out;
  if (!modelparallel.enabled) return out;
  const std::string p = "distribution.modelparallel.parameters";
  const ModelParallel& m = modelparallel;
  const int mp = m.tensor_parallel_degree * m.partitions;
  if (world % mp != 0) {
    out.push_back(p + ": tensor_parallel_degree x partitions = " + std::to_string(mp) +
                  " must divide the " + std::to_string(world) +
                  " workers (instance_count x processes_per_host)");
    return out;
  }
  const int dp = world / mp;
  if (dp % m.sharded_data_parallel_degree != 0)
    out.push_back(p + ".sharded_data_parallel_degree: expected a divisor of the data-parallel "
                      "degree " + std::to_string(dp) + " (" + std::to_string(world) +
                  " workers / tensor_parallel_degree / partitions), found " +
                  std::to_string(m.sharded_data_parallel_degree));
  return out;
}

std::vector<std::string> Distribution::unsupported_by_trainer() const {
  // Nothing today: bf16, the last refusal, runs under every strategy (issue 27).
  return {};
}

}  // namespace heft::config
