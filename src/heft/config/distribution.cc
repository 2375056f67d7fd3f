#include "heft/config/distribution.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "heft/config/nearest.h"

namespace heft::config {

namespace {

const std::vector<std::string> kStrategyKeys = {"enabled", "parameters"};
const std::vector<std::string> kModelParallelKeys = {
    "partitions",         "microbatches",       "pipeline",
    "optimize",           "memory_weight",      "placement_strategy",
    "auto_partition",     "default_partition",  "active_microbatches",
    "activation_checkpointing", "bf16",         "ddp",
    "tensor_parallel_degree",   "sharded_data_parallel_degree", "partition_boundaries",
    "virtual_stages",     "auto_layout",        "memory_limit_gb",
    "auto_layout_trials"};
constexpr double kMaxMemoryLimitGb = 1e6;
constexpr int kMaxDegree = 1024;
constexpr int kMaxMicrobatches = 1 << 16;

// One rule per integer knob: its range, read from the block and from a hyperparameter.
struct IntKnob {
  const char* name;
  int lo, hi;
  int ModelParallel::*member;
};
const IntKnob kPartitions{"partitions", 1, kMaxDegree, &ModelParallel::partitions};
const IntKnob kMicrobatches{"microbatches", 1, kMaxMicrobatches, &ModelParallel::microbatches};
const IntKnob kDefaultPartition{"default_partition", 0, kMaxDegree - 1,
                                &ModelParallel::default_partition};
const IntKnob kActiveMicrobatches{"active_microbatches", 1, kMaxMicrobatches,
                                  &ModelParallel::active_microbatches};
const IntKnob kTensorDegree{"tensor_parallel_degree", 1, kMaxDegree,
                            &ModelParallel::tensor_parallel_degree};
const IntKnob kShardedDegree{"sharded_data_parallel_degree", 1, kMaxDegree,
                             &ModelParallel::sharded_data_parallel_degree};
const IntKnob kVirtualStages{"virtual_stages", 1, kMaxDegree, &ModelParallel::virtual_stages};
const IntKnob kLayoutTrials{"auto_layout_trials", 0, 16, &ModelParallel::auto_layout_trials};

std::string found(const nlohmann::json& v) {
  if (v.is_string()) return "'" + v.get<std::string>() + "'";
  return v.dump();
}

std::string integer_expected(const IntKnob& k) {
  return "expected an integer from " + std::to_string(k.lo) + " to " + std::to_string(k.hi);
}

// partition_boundaries against the rest of m: ascending layer indices from 1, one per stage
// after the first. Empty when they fit. `shown`: the value as the user wrote it.
std::string boundaries_problem(const std::vector<int>& b, const ModelParallel& m,
                               const std::string& shown) {
  bool ascending = true;
  for (size_t i = 0; ascending && i < b.size(); ++i)
    ascending = b[i] >= 1 && (i == 0 || b[i] > b[i - 1]);
  if (!ascending)
    return "expected a list of ascending layer indices from 1 (the first layer of each stage "
           "after the first, such as [3, 5]), found " + shown;
  const int want = m.partitions * m.virtual_stages - 1;
  if (static_cast<int>(b.size()) != want)
    return "expected " + std::to_string(want) +
           " layer indices (one per stage after the first: partitions x virtual_stages - 1), "
           "found " + std::to_string(b.size());
  return "";
}

// The knobs auto_layout chooses that m gives another value than their default, as
// "name: value", each with its name.
std::vector<std::pair<std::string, std::string>> auto_layout_conflicts(const ModelParallel& m) {
  std::vector<std::pair<std::string, std::string>> out;
  const auto integer = [&](const char* name, int value) {
    if (value != 1) out.emplace_back(name, std::to_string(value));
  };
  integer("partitions", m.partitions);
  integer("microbatches", m.microbatches);
  integer("virtual_stages", m.virtual_stages);
  integer("tensor_parallel_degree", m.tensor_parallel_degree);
  integer("sharded_data_parallel_degree", m.sharded_data_parallel_degree);
  if (m.activation_checkpointing) out.emplace_back("activation_checkpointing", "true");
  if (m.pipeline != "interleaved") out.emplace_back("pipeline", m.pipeline);
  return out;
}

std::string auto_layout_text(const std::string& knob, const std::string& value) {
  return "true chooses " + knob + " itself, but " + knob + " is " + value +
         "; give one or the other (docs/auto-layout.md)";
}

std::string virtual_stages_problem(const ModelParallel& m) {
  if (m.virtual_stages > 1 && m.pipeline != "interleaved")
    return "needs pipeline: interleaved, found pipeline: " + m.pipeline;
  return "";
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

  void integer(const nlohmann::json& m, const std::string& path, const IntKnob& k,
               ModelParallel& into) {
    if (!m.contains(k.name)) return;
    const nlohmann::json& v = m[k.name];
    const bool whole = v.is_number_integer() ||
                       (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    const double x = v.is_number() ? v.get<double>() : 0;
    if (!whole || x < k.lo || x > k.hi)
      return error(path + "." + k.name, integer_expected(k) + ", found " + found(v));
    into.*k.member = static_cast<int>(x);
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

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

void parse_placement(Reader& r, const nlohmann::json& p, const std::string& path,
                     ModelParallel& m) {
  if (!p.contains("placement_strategy")) return;
  const nlohmann::json& v = p["placement_strategy"];
  if (v.is_string() && valid_placement(v.get<std::string>()))
    m.placement_strategy = v.get<std::string>();
  else
    r.error(path + ".placement_strategy",
            "expected cluster, spread or an order of the letters D, P and T (such as DTP), "
            "found " + found(v));
}

void parse_boundaries(Reader& r, const nlohmann::json& p, const std::string& parameters,
                      ModelParallel& m) {
  if (!p.contains("partition_boundaries")) return;
  const nlohmann::json& v = p["partition_boundaries"];
  const std::string path = parameters + ".partition_boundaries";
  bool integers = v.is_array();
  for (size_t i = 0; integers && i < v.size(); ++i) integers = v[i].is_number_integer();
  const std::vector<int> b = integers ? v.get<std::vector<int>>() : std::vector<int>{0};
  if (const std::string problem = boundaries_problem(b, m, found(v)); !problem.empty())
    r.error(path, problem);
  else if (m.auto_partition)
    r.error(path, "applies with auto_partition: false only (the automatic partitioner "
                  "chooses the boundaries otherwise)");
  else
    m.partition_boundaries = b;
}

void parse_memory_limit(Reader& r, const nlohmann::json& p, const std::string& path, ModelParallel& m) {
  if (!p.contains("memory_limit_gb")) return;
  const nlohmann::json& v = p["memory_limit_gb"];
  if (!v.is_number() || !(v.get<double>() > 0) || v.get<double>() > kMaxMemoryLimitGb)
    return r.error(path + ".memory_limit_gb",
                   "expected a number of GB above 0 and at most 1000000, found " + found(v));
  m.memory_limit_gb = v.get<double>();
}

// modelparallel.parameters (the library's other names already translated), in the order of
// the documentation.
void parse_parameters(Reader& r, const nlohmann::json& p, const std::string& path,
                      ModelParallel& m) {
  r.keys(p, path, kModelParallelKeys);
  r.integer(p, path, kPartitions, m);
  r.integer(p, path, kMicrobatches, m);
  r.choice(p, "pipeline", path, kPipelineKinds, &m.pipeline);
  r.choice(p, "optimize", path, {"speed", "memory"}, &m.optimize);
  m.memory_weight = m.optimize == "memory" ? 0.8 : 0.2;
  r.number(p, "memory_weight", path, 0.0, 1.0, &m.memory_weight);
  parse_placement(r, p, path, m);
  r.boolean(p, "auto_partition", path, &m.auto_partition);
  r.integer(p, path, kDefaultPartition, m);
  r.integer(p, path, kActiveMicrobatches, m);
  r.boolean(p, "activation_checkpointing", path, &m.activation_checkpointing);
  r.boolean(p, "bf16", path, &m.bf16);
  bool ddp = false;
  if (p.contains("ddp") && p["ddp"].is_boolean()) m.ddp = p["ddp"].get<bool>();
  r.boolean(p, "ddp", path, &ddp);  // the message for a value that is not a boolean
  r.integer(p, path, kTensorDegree, m);
  r.integer(p, path, kShardedDegree, m);
  r.integer(p, path, kVirtualStages, m);
  parse_boundaries(r, p, path, m);
  r.boolean(p, "auto_layout", path, &m.auto_layout);
  parse_memory_limit(r, p, path, m);
  r.integer(p, path, kLayoutTrials, m);
  if (m.auto_layout)
    for (const auto& [knob, value] : auto_layout_conflicts(m))
      r.error(path + ".auto_layout", auto_layout_text(path + "." + knob, value));
  if (const std::string problem = virtual_stages_problem(m); !problem.empty())
    r.error(path + ".virtual_stages", problem);
  if (m.default_partition >= m.partitions && p.contains("default_partition"))
    r.error(path + ".default_partition",
            "expected a stage below partitions (" + std::to_string(m.partitions) + "), found " +
                std::to_string(m.default_partition));
}

// Hyperparameters over a ModelParallel: each knob checked by its rule, noted in `overridden`.
class Overrides {
 public:
  Overrides(ModelParallel& m, std::vector<std::string>& overridden, std::string block)
      : m_(m), overridden_(overridden), block_(std::move(block)) {}

  void integer(int64_t value, const IntKnob& k) {
    if (value == 0) return;
    if (value < k.lo || value > k.hi)
      return error(k.name, integer_expected(k) + ", found " + std::to_string(value));
    m_.*k.member = static_cast<int>(value);
    given(k.name);
  }
  void pipeline(const std::string& value) {
    if (value.empty()) return;
    if (std::find(kPipelineKinds.begin(), kPipelineKinds.end(), value) == kPipelineKinds.end())
      return error("pipeline", "expected simple or interleaved, found '" + value + "'");
    m_.pipeline = value;
    given("pipeline");
  }
  void flag(bool value, const char* name, bool ModelParallel::*member) {
    if (!value) return;
    m_.*member = true;
    given(name);
  }
  // "3,5": read into the list; checked with the other knobs by relations().
  void boundaries(const std::string& value) {
    if (value.empty()) return;
    std::vector<int> b;
    std::stringstream list(value);
    for (std::string item; std::getline(list, item, ',');) {
      if (item.empty()) continue;
      if (item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos)
        return error("partition_boundaries", "expected layer indices separated by commas "
                                             "(\"3,5\"), found '" + value + "'");
      b.push_back(std::stoi(item));
    }
    if (b.empty()) return;
    m_.partition_boundaries = b;
    m_.auto_partition = false;  // a given split
    given("partition_boundaries");
    boundaries_text_ = "'" + value + "'";
  }
  // The rules between knobs, once some came from hyperparameters.
  void relations() {
    if (overridden_.empty() || !problems_.empty()) return;
    if (const std::string p = virtual_stages_problem(m_); !p.empty())
      problems_.push_back(path("virtual_stages") + ": " + p);
    if (m_.partition_boundaries.empty()) return;
    const std::string shown = boundaries_text_.empty() ? "the block's" : boundaries_text_;
    if (const std::string p = boundaries_problem(m_.partition_boundaries, m_, shown); !p.empty())
      problems_.push_back(path("partition_boundaries") + ": " + p);
  }
  // auto_layout and memory_limit_gb from hyperparameters, then the knobs auto_layout
  // chooses checked against it (whichever side gave each).
  void auto_layout(const Hyperparameters& hp) {
    if (hp.auto_layout) {
      m_.auto_layout = true;
      given("auto_layout");
    }
    if (hp.memory_limit_gb != 0) {
      if (!(hp.memory_limit_gb > 0) || hp.memory_limit_gb > kMaxMemoryLimitGb)
        return error("memory_limit_gb", "expected a number of GB above 0 and at most 1000000, found " +
                                            std::to_string(hp.memory_limit_gb));
      if (!m_.auto_layout) return error("memory_limit_gb", "applies with auto_layout true only");
      m_.memory_limit_gb = hp.memory_limit_gb;
      given("memory_limit_gb");
    }
    if (hp.auto_layout_trials >= 0) {
      if (hp.auto_layout_trials > kLayoutTrials.hi)
        return error("auto_layout_trials", integer_expected(kLayoutTrials) + ", found " +
                                               std::to_string(hp.auto_layout_trials));
      if (!m_.auto_layout) return error("auto_layout_trials", "applies with auto_layout true only");
      m_.auto_layout_trials = static_cast<int>(hp.auto_layout_trials);
      given("auto_layout_trials");
    }
    if (!m_.auto_layout && m_.memory_limit_gb > 0)
      return problems_.push_back(path("memory_limit_gb") + ": applies with auto_layout true only");
    if (!m_.auto_layout && m_.auto_layout_trials != ModelParallel{}.auto_layout_trials)
      return problems_.push_back(path("auto_layout_trials") + ": applies with auto_layout true only");
    if (!m_.auto_layout || !problems_.empty()) return;
    for (const auto& [knob, value] : auto_layout_conflicts(m_))
      problems_.push_back(path("auto_layout") + ": " + auto_layout_text(path(knob), value));
    if (hp.gradient_accumulation > 1)
      problems_.push_back(path("auto_layout") + ": " +
                          auto_layout_text("hyperparameters.gradient_accumulation",
                                           std::to_string(hp.gradient_accumulation)) +
                          " (micro-batches without a pipeline are gradient accumulation)");
  }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  void given(const char* name) {
    overridden_.emplace_back(name);
    m_.enabled = true;
  }
  void error(const std::string& name, const std::string& text) {
    problems_.push_back("hyperparameters." + name + ": " + text);
  }
  std::string path(const std::string& name) const {
    return std::find(overridden_.begin(), overridden_.end(), name) != overridden_.end()
               ? "hyperparameters." + name
               : block_ + "." + name;
  }

  ModelParallel& m_;
  std::vector<std::string>& overridden_;
  std::string block_;  // the parameters' field in the spec
  std::vector<std::string> problems_;
  std::string boundaries_text_;
};

}  // namespace

Result<Distribution> Distribution::parse(const nlohmann::json& block) {
  Distribution d;
  std::vector<std::string> errors;
  Reader r(&errors);
  if (block.is_null()) return Result<Distribution>::success(d);
  if (r.map(block, "distribution")) {
    const SdkTranslation t = translate_sdk(block, &errors);
    d.launch = t.launch;
    d.dataparallel = t.dataparallel;
    const std::string dp = "distribution.dataparallel";
    bool enabled = false;
    if (t.block.contains("dataparallel") && r.map(t.block["dataparallel"], dp)) {
      r.keys(t.block["dataparallel"], dp, {"enabled"});
      r.boolean(t.block["dataparallel"], "enabled", dp, &enabled);
    }
    d.dataparallel = d.dataparallel || enabled;
    const std::string path = t.modelparallel_field;
    d.parameters_field = path + ".parameters";
    if (t.block.contains("modelparallel") && r.map(t.block["modelparallel"], path)) {
      const nlohmann::json& s = t.block["modelparallel"];
      r.keys(s, path, kStrategyKeys);
      r.boolean(s, "enabled", path, &d.modelparallel.enabled);
      if (s.contains("parameters") && r.map(s["parameters"], d.parameters_field)) {
        nlohmann::json p = s["parameters"];
        translate_smp_parameters(p, d.parameters_field, &errors);
        if (d.modelparallel.enabled)
          parse_parameters(r, p, d.parameters_field, d.modelparallel);
        else if (!p.empty())
          r.error(d.parameters_field, "applies with enabled: true only (the parameters of a "
                                      "model-parallel block that is off are not used)");
      }
    }
  }
  if (!errors.empty()) return Result<Distribution>::failure(joined(errors));
  return Result<Distribution>::success(d);
}

Result<Distribution> Distribution::with_overrides(const Hyperparameters& hp) const {
  Distribution d = *this;
  ModelParallel& m = d.modelparallel;
  if (!m.enabled) m = ModelParallel{};  // a disabled block's parameters are not used
  Overrides o(m, d.overridden, d.parameters_field);
  o.integer(hp.partitions, kPartitions);
  o.integer(hp.microbatches, kMicrobatches);
  o.pipeline(hp.pipeline);
  o.integer(hp.virtual_stages, kVirtualStages);
  o.integer(hp.tensor_parallel_degree, kTensorDegree);
  o.integer(hp.sharded_data_parallel_degree, kShardedDegree);
  o.boundaries(hp.partition_boundaries);
  o.flag(hp.activation_checkpointing, "activation_checkpointing",
         &ModelParallel::activation_checkpointing);
  o.flag(hp.bf16, "bf16", &ModelParallel::bf16);
  o.relations();
  o.auto_layout(hp);
  if (!o.problems().empty()) return Result<Distribution>::failure(joined(o.problems()));
  if (m.active_microbatches == 0) m.active_microbatches = m.partitions + 2;
  return Result<Distribution>::success(d);
}

}  // namespace heft::config
