#include "heft/tune/tuning_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "heft/config/hyperparameters.h"
#include "heft/error.h"
#include "heft/job/record/job_db.h"
#include "heft/job/spec/spec_yaml.h"

namespace heft::tune {

namespace fs = std::filesystem;
using heft::Result;
using job::SpecReader;

namespace {

const std::vector<std::string> kTopKeys = {"name", "base_name", "objective", "strategy", "max_jobs",
                                           "max_parallel_jobs", "random_seed", "early_stopping",
                                           "hyperband", "diverged_if",
                                           "warm_start", "hyperparameter_ranges", "training_job"};

bool get_number(SpecReader& r, const YAML::Node& n, const std::string& path, double* out) {
  if (!job::present(n)) return false;
  try {
    if (n.IsScalar()) {
      *out = n.as<double>();
      return true;
    }
  } catch (const YAML::Exception&) {
  }
  r.error(path, n, "expected a number, found " + job::found(n));
  return false;
}

// A range's `when: {CATEGORICAL: value or [values]}`.
bool read_condition(SpecReader& r, const YAML::Node& n, const std::string& path, Condition* when) {
  if (!n.IsMap() || n.size() != 1) {
    r.error(path, n, "expected {categorical range: value or [values]}, found " + job::found(n));
    return false;
  }
  const auto it = n.begin();
  when->range = it->first.Scalar();
  const YAML::Node values = it->second;
  if (values.IsScalar()) when->values.push_back(values.Scalar());
  else if (values.IsSequence())
    for (const YAML::Node& v : values) when->values.push_back(v.IsScalar() ? v.Scalar() : "");
  if (when->values.empty() || std::find(when->values.begin(), when->values.end(), "") != when->values.end()) {
    r.error(path + "." + when->range, values, "expected a value or a list of values, found " + job::found(values));
    return false;
  }
  return true;
}

// diverged_if: {loss_metric, loss_above_first, objective_worse_than} (divergence.h).
void read_diverged_if(SpecReader& r, const YAML::Node& n, DivergenceRule* rule) {
  if (!r.expect_map(n, "diverged_if")) return;
  r.check_keys(n, "diverged_if", {"loss_metric", "loss_above_first", "objective_worse_than"});
  if (job::present(n["loss_metric"])) r.get_string(n["loss_metric"], "diverged_if.loss_metric", &rule->loss_metric);
  double v = 0;
  if (get_number(r, n["loss_above_first"], "diverged_if.loss_above_first", &v)) {
    if (v > 0 && std::isfinite(v)) rule->loss_above_first = v;
    else r.error("diverged_if.loss_above_first", n["loss_above_first"], "expected a number > 0");
  }
  if (get_number(r, n["objective_worse_than"], "diverged_if.objective_worse_than", &v)) {
    if (std::isfinite(v)) rule->objective_worse_than = v;
    else r.error("diverged_if.objective_worse_than", n["objective_worse_than"], "expected a finite number");
  }
}

// One range list (continuous / integer / categorical) into `space`.
void read_ranges(SpecReader& r, const YAML::Node& list, const std::string& kind,
                 SearchSpace& space) {
  const std::string base = "hyperparameter_ranges." + kind;
  if (!list.IsSequence()) {
    r.error(base, list, "expected a list of ranges, found " + job::found(list));
    return;
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    const std::string path = base + "[" + std::to_string(i) + "]";
    if (!r.expect_map(item, path)) continue;
    r.check_keys(item, path,
                 kind == "categorical" ? std::vector<std::string>{"name", "values", "when"}
                                       : std::vector<std::string>{"name", "min", "max", "scaling", "when"});
    std::string name;
    if (!r.get_string(item["name"], path + ".name", &name)) continue;
    Condition when;
    if (job::present(item["when"]) && !read_condition(r, item["when"], path + ".when", &when)) continue;
    try {
      if (kind == "categorical") {
        const YAML::Node values = item["values"];
        if (!values.IsSequence()) {
          r.error(path + ".values", values, "expected a list of values, found " + job::found(values));
          continue;
        }
        std::vector<std::string> v;
        for (const YAML::Node& x : values) v.push_back(x.IsScalar() ? x.Scalar() : "");
        space.add_categorical(name, v, when);
        continue;
      }
      double min = 0, max = 0;
      const bool has_min = get_number(r, item["min"], path + ".min", &min);
      const bool has_max = get_number(r, item["max"], path + ".max", &max);
      if (!job::present(item["min"])) r.error(path + ".min", item, "required");
      if (!job::present(item["max"])) r.error(path + ".max", item, "required");
      if (!has_min || !has_max) continue;
      Scaling scaling = Scaling::kAuto;
      if (job::present(item["scaling"])) scaling = parse_scaling(item["scaling"].Scalar());
      if (kind == "integer") {
        if (min != static_cast<double>(static_cast<int64_t>(min)) ||
            max != static_cast<double>(static_cast<int64_t>(max))) {
          r.error(path, item, "min and max of an integer range must be integers");
          continue;
        }
        space.add_integer(name, static_cast<int64_t>(min), static_cast<int64_t>(max), scaling, when);
      } else {
        space.add_continuous(name, min, max, scaling, when);
      }
    } catch (const InvalidArgument& e) {
      r.error(path, item, e.what());
    }
  }
}


// name, or base_name (then name is base_name-<UTC time>).
void read_name(SpecReader& r, const YAML::Node& root, TuningSpec& spec) {
  if (job::present(root["name"])) {
    // A folder under $HEFT_HOME/tunings, and the prefix of trial names (<name>-NNN).
    constexpr size_t kMaxName = 63 - 4;
    if (r.get_string(root["name"], "name", &spec.name) &&
        (!job::valid_job_name(spec.name) || spec.name.size() > kMaxName))
      r.error("name", root["name"],
              "expected letters, digits and '-' (not first or last), at most " +
                  std::to_string(kMaxName) + " characters (trials add -NNN), found " +
                  job::found(root["name"]));
    return;
  }
  if (!job::present(root["base_name"])) {
    r.error("name", root, "required (or base_name): the tuning job's name");
    return;
  }
  std::string base;
  if (!r.get_string(root["base_name"], "base_name", &base)) return;
  if (!job::is_base_name(base)) {  // the trial number fits too
    r.error("base_name", root["base_name"],
            "expected letters, digits and '-' (not first or last), at most " +
                std::to_string(job::kMaxBaseName) + " characters, found " + job::found(root["base_name"]));
    return;
  }
  spec.base_name = base;
  spec.name = job::timestamped_name(base, job::unix_now());
}

// objective: {metric, type: Maximize or Minimize}.
void read_objective(SpecReader& r, const YAML::Node& root, TuningSpec& spec) {
  const YAML::Node objective = root["objective"];
  if (!job::present(objective)) {
    r.error("objective", root, "required: {metric: NAME, type: Maximize or Minimize}");
    return;
  }
  if (!r.expect_map(objective, "objective")) return;
  r.check_keys(objective, "objective", {"metric", "type"});
  r.get_string(objective["metric"], "objective.metric", &spec.objective_metric);
  std::string type;
  if (r.get_string(objective["type"], "objective.type", &type)) {
    if (type == "Maximize") spec.maximize = true;
    else if (type != "Minimize")
      r.error("objective.type", objective["type"], "expected Maximize or Minimize, found '" + type + "'");
  }
}

// strategy, and hyperband's resource (only with strategy: Hyperband).
void read_strategy(SpecReader& r, const YAML::Node& root, TuningSpec& spec) {
  if (job::present(root["strategy"])) {
    r.get_string(root["strategy"], "strategy", &spec.strategy);
    if (spec.strategy != "Grid" && spec.strategy != "Random" && spec.strategy != "Bayesian" &&
        spec.strategy != "Hyperband")
      r.error("strategy", root["strategy"],
              "expected Grid, Random, Bayesian or Hyperband, found '" + spec.strategy + "'");
  }
  const YAML::Node hb = root["hyperband"];
  if (!job::present(hb)) return;
  if (spec.strategy != "Hyperband") r.error("hyperband", hb, "only with strategy: Hyperband");
  if (!r.expect_map(hb, "hyperband")) return;
  r.check_keys(hb, "hyperband", {"min_resource", "max_resource", "reduction_factor"});
  r.get_int(hb["min_resource"], "hyperband.min_resource", 1, 1000000, &spec.hyperband_min_resource);
  r.get_int(hb["max_resource"], "hyperband.max_resource", 1, 1000000, &spec.hyperband_max_resource);
  r.get_int(hb["reduction_factor"], "hyperband.reduction_factor", 2, 100,
            &spec.hyperband_reduction_factor);
  if (spec.hyperband_max_resource < spec.hyperband_min_resource)
    r.error("hyperband.max_resource", hb["max_resource"],
            "must be at least min_resource (" + std::to_string(spec.hyperband_min_resource) +
                "), found " + std::to_string(spec.hyperband_max_resource));
}

// max_jobs, max_parallel_jobs, random_seed, early_stopping (after the strategy: Hyperband
// stops trials itself).
void read_limits(SpecReader& r, const YAML::Node& root, TuningSpec& spec) {
  r.get_int(root["max_jobs"], "max_jobs", 1, 10000, &spec.max_jobs);
  r.get_int(root["max_parallel_jobs"], "max_parallel_jobs", 1, 100, &spec.max_parallel_jobs);
  if (spec.max_parallel_jobs > spec.max_jobs)
    r.error("max_parallel_jobs", root["max_parallel_jobs"],
            "must be at most max_jobs (" + std::to_string(spec.max_jobs) + "), found " +
                std::to_string(spec.max_parallel_jobs));
  int seed = 0;
  if (r.get_int(root["random_seed"], "random_seed", 0, std::numeric_limits<int>::max(), &seed))
    spec.random_seed = static_cast<uint64_t>(seed);
  if (!job::present(root["early_stopping"])) return;
  std::string es;
  if (!r.get_string(root["early_stopping"], "early_stopping", &es)) return;
  if (es == "Auto") spec.early_stopping = true;
  else if (es != "Off")
    r.error("early_stopping", root["early_stopping"], "expected Off or Auto, found '" + es + "'");
  if (spec.early_stopping && spec.strategy == "Hyperband")
    r.error("early_stopping", root["early_stopping"],
            "Hyperband stops trials itself: leave early_stopping Off with it");
}

// warm_start: {parents: [tuning jobs], type: IdenticalDataAndAlgorithm}.
void read_warm_start(SpecReader& r, const YAML::Node& warm, TuningSpec& spec) {
  if (!r.expect_map(warm, "warm_start")) return;
  r.check_keys(warm, "warm_start", {"parents", "type"});
  std::string type = "IdenticalDataAndAlgorithm";
  if (job::present(warm["type"]) && r.get_string(warm["type"], "warm_start.type", &type) &&
      type != "IdenticalDataAndAlgorithm")
    r.error("warm_start.type", warm["type"],
            "expected IdenticalDataAndAlgorithm (the only type heft has), found '" + type + "'");
  const YAML::Node parents = warm["parents"];
  if (!parents.IsSequence() || parents.size() == 0) {
    r.error("warm_start.parents", parents, "expected a list of tuning job names, found " + job::found(parents));
    return;
  }
  for (size_t i = 0; i < parents.size(); ++i) {
    std::string p;
    if (r.get_string(parents[i], "warm_start.parents[" + std::to_string(i) + "]", &p))
      spec.warm_start_parents.push_back(p);
  }
}

// hyperparameter_ranges: {continuous, integer, categorical}, their conditions, and Grid's
// refusal of continuous ranges (after the strategy).
void read_search_space(SpecReader& r, const YAML::Node& root, TuningSpec& spec) {
  const YAML::Node ranges = root["hyperparameter_ranges"];
  if (!job::present(ranges)) {
    r.error("hyperparameter_ranges", root, "required: continuous, integer or categorical ranges");
  } else if (r.expect_map(ranges, "hyperparameter_ranges")) {
    r.check_keys(ranges, "hyperparameter_ranges", {"continuous", "integer", "categorical"});
    for (const char* kind : {"continuous", "integer", "categorical"})
      if (job::present(ranges[kind])) read_ranges(r, ranges[kind], kind, spec.ranges);
    try {
      spec.ranges.check_conditions();
    } catch (const InvalidArgument& e) {
      r.error("hyperparameter_ranges", ranges, e.what());
    }
    if (spec.ranges.empty() && r.errors().empty())
      r.error("hyperparameter_ranges", ranges, "expected at least one range");
  }
  if (spec.strategy != "Grid") return;
  for (const Range& range : spec.ranges.ranges())
    if (range.kind == Range::Kind::kContinuous)
      r.error("hyperparameter_ranges.continuous", ranges,
              "Grid takes integer and categorical ranges only, found the continuous range '" +
                  range.name + "'");
}

// training_job: a template file (relative to `base_dir`) or an inline spec without a name,
// kept as YAML text (validated as a job spec once the rest of the document is).
void read_training_job(SpecReader& r, const YAML::Node& root, const std::string& source,
                       const std::string& base_dir, TuningSpec& spec) {
  const YAML::Node tj = root["training_job"];
  if (!job::present(tj)) {
    r.error("training_job", root, "required: {template: job.yaml} or an inline job spec");
    return;
  }
  if (!r.expect_map(tj, "training_job")) return;
  if (!job::present(tj["template"])) {
    if (job::present(tj["name"]))
      r.error("training_job.name", tj["name"], "trials are named after the tuning job; remove it");
    YAML::Emitter out;
    out << tj;
    spec.training_job_yaml = out.c_str();
    spec.training_job_source = source + ": training_job";
    return;
  }
  r.check_keys(tj, "training_job", {"template"});
  std::string path;
  if (!r.get_string(tj["template"], "training_job.template", &path)) return;
  if (!fs::path(path).is_absolute()) path = (fs::path(base_dir) / path).string();
  Result<std::string> text = job::read_spec_text(path, "the template");
  if (!text.ok()) {
    r.error("training_job.template", tj["template"], text.error());
    return;
  }
  spec.training_job_yaml = std::move(text).value();
  spec.training_job_source = path;
  spec.template_path = path;
}

// heft-train's ranges name its settings, each value one it accepts: a misspelt one would
// fail every trial.
Status check_builtin_ranges(const TuningSpec& spec, const std::string& source) {
  if (!spec.training_job.builtin_trainer()) return Status::success();
  for (const Range& range : spec.ranges.ranges()) {
    std::string problem;
    if (!config::is_hyperparameter(range.name)) {
      problem = "unknown heft-train setting" +
                config::unknown_hyperparameter_text(range.name).substr(std::string("unknown").size());
    } else {
      for (const std::string& v : range.values)
        if (problem.empty()) problem = config::check_hyperparameter(range.name, v).error();
    }
    if (!problem.empty())
      return Status::failure(source + ": hyperparameter_ranges: '" + range.name + "': " + problem);
  }
  return Status::success();
}

// The objective's metric, and diverged_if's loss metric unless none, are among the training
// job's metric_definitions.
Status check_metrics(const TuningSpec& spec, const std::string& source) {
  const std::vector<job::MetricDefinition>& metrics = spec.training_job.metric_definitions;
  std::string defined;
  bool found = false;
  for (const job::MetricDefinition& m : metrics) {
    found = found || m.name == spec.objective_metric;
    defined += (defined.empty() ? "" : ", ") + m.name;
  }
  const std::string listed = "(" + (defined.empty() ? std::string("it defines none") : defined) + ")";
  if (!found)
    return Status::failure(source + ": objective.metric: '" + spec.objective_metric +
                           "' is not one of the training job's metric_definitions " + listed);
  const std::string& loss = spec.diverged_if.loss_metric;
  if (!loss.empty() && loss != "none" &&
      std::none_of(metrics.begin(), metrics.end(),
                   [&](const job::MetricDefinition& m) { return m.name == loss; }))
    return Status::failure(source + ": diverged_if.loss_metric: '" + loss +
                           "' is not one of the training job's metric_definitions " + listed +
                           ", nor none");
  return Status::success();
}

// The training job must be valid as a job spec (named as the first trial), and fit the
// ranges and the objective.
Status read_training_spec(TuningSpec& spec, const std::string& source) {
  Result<job::JobSpec> training =
      job::parse_spec(spec.training_job_yaml, spec.training_job_source, {"name=" + spec.name + "-001"});
  if (!training.ok()) return Status::failure(training.error());
  spec.training_job = std::move(training).value();
  if (Status ranges = check_builtin_ranges(spec, source); !ranges.ok()) return ranges;
  return check_metrics(spec, source);
}

}  // namespace

Result<TuningSpec> parse_tuning_spec(const std::string& text, const std::string& source,
                                     const std::string& base_dir,
                                     const std::vector<std::string>& overrides) {
  // The same reader as a job spec's (size, aliases, cycles, depth): the training_job inside
  // is checked with the rest of the document before it is converted.
  SpecReader r(source);
  Result<YAML::Node> document = job::load_spec_document(text, source, overrides, r);
  if (!document.ok()) return Result<TuningSpec>::failure(document.error());
  YAML::Node root = document.value();
  TuningSpec spec;
  if (!r.expect_map(root, "")) return Result<TuningSpec>::failure(r.message());
  r.check_keys(root, "", kTopKeys);
  // In this order: each message keeps its place in the list.
  read_name(r, root, spec);
  read_objective(r, root, spec);
  read_strategy(r, root, spec);
  read_limits(r, root, spec);
  if (job::present(root["diverged_if"])) read_diverged_if(r, root["diverged_if"], &spec.diverged_if);
  if (job::present(root["warm_start"])) read_warm_start(r, root["warm_start"], spec);
  read_search_space(r, root, spec);
  read_training_job(r, root, source, base_dir, spec);
  if (!r.errors().empty()) return Result<TuningSpec>::failure(r.message());
  if (Status training = read_training_spec(spec, source); !training.ok())
    return Result<TuningSpec>::failure(training.error());
  return Result<TuningSpec>::success(std::move(spec));
}

Result<TuningSpec> load_tuning_spec(const std::string& path,
                                    const std::vector<std::string>& overrides) {
  Result<std::string> text = job::read_spec_text(path, "the tuning spec");
  if (!text.ok()) return Result<TuningSpec>::failure(text.error());
  const fs::path parent = fs::path(path).parent_path();
  return parse_tuning_spec(text.value(), path, parent.empty() ? "." : parent.string(), overrides);
}

}  // namespace heft::tune
