// The spec's monitoring blocks (spec_monitoring.h): metric_definitions, rules, profiler.
#include "heft/job/spec/spec_monitoring.h"

#include <re2/re2.h>

#include <algorithm>

#include "heft/config/nearest.h"
#include "heft/job/spec/metric_regex.h"

namespace heft::job {

namespace {

const std::vector<std::string> kRuleKeys = {"rule", "parameters", "action"};
const std::vector<std::string> kActionKeys = {"stop", "notify"};
const std::vector<std::string> kNotifyKeys = {"exec", "url", "timeout_s"};
constexpr size_t kMaxNotifyArgs = 64;
const char kActionForms[] =
    "stop, none, or {stop: true|false, notify: {exec: [command, args...], url: http://..., "
    "timeout_s}}";
const std::vector<std::string> kProfilerKeys = {"enabled", "interval_s"};
const std::vector<std::string> kMetricKeys = {"name", "regex"};
constexpr int kMaxMetricDefinitions = 40;
constexpr size_t kMaxMetricName = 255;
constexpr size_t kMaxMetricRegex = 500;

// One {name, regex}: both present, of bounded size, the regex RE2 with a group.
bool metric_definition(SpecReader& r, const YAML::Node& n, const std::string& path,
                       MetricDefinition* def) {
  if (!n.IsMap()) {
    r.error(path, n, "expected {name, regex}, found " + found(n));
    return false;
  }
  r.check_keys(n, path, kMetricKeys);
  bool ok = true;
  for (const char* field : {"name", "regex"}) {
    if (!present(n[field])) {
      r.error(path + "." + field, n, std::string("required; expected ") +
                                          (field[0] == 'n' ? "a metric name such as train:loss"
                                                           : "a regular expression whose first "
                                                             "group is the number"));
      ok = false;
    }
  }
  if (!ok) return false;
  if (!r.get_string(n["name"], path + ".name", &def->name)) return false;
  if (!r.get_string(n["regex"], path + ".regex", &def->regex)) return false;
  if (def->name.empty() || def->name.size() > kMaxMetricName) {
    r.error(path + ".name", n["name"], "expected 1 to " + std::to_string(kMaxMetricName) +
                                            " characters, found " + found(n["name"]));
    return false;
  }
  if (def->regex.size() > kMaxMetricRegex) {
    r.error(path + ".regex", n["regex"], "expected at most " +
                                              std::to_string(kMaxMetricRegex) +
                                              " characters, found " +
                                              std::to_string(def->regex.size()));
    return false;
  }
  const auto re = compile_metric_regex(def->regex);
  if (!re) {
    r.error(path + ".regex", n["regex"],
             "expected a regular expression in RE2 syntax (no backreferences or look-around: "
             "heft matches worker output in linear time), found " + found(n["regex"]) + " (" +
             re.error() + ")");
    return false;
  }
  if (capturing_groups(*re.value()) < 1) {
    r.error(path + ".regex", n["regex"],
             "expected a regular expression with a group around the number, such as "
             "loss=([0-9.eE+-]+), found " + found(n["regex"]));
    return false;
  }
  return true;
}

// A rule's parameters over its defaults: numbers non-negative, metric names not empty.
void read_rule_parameters(SpecReader& r, const YAML::Node& params, const std::string& path,
                          const RuleInfo& info, RuleSpec& rule) {
  if (!present(params) || !r.expect_map(params, path + ".parameters")) return;
  std::vector<std::string> known;
  for (const RuleParameter& p : info.parameters) known.push_back(p.name);
  r.check_keys(params, path + ".parameters", known);
  for (const RuleParameter& p : info.parameters) {
    const YAML::Node v = params[p.name];
    if (!present(v)) continue;
    const std::string vpath = path + ".parameters." + p.name;
    const nlohmann::json value = v.IsScalar() ? scalar_json(v) : nlohmann::json();
    if (p.default_value.is_number()) {
      if (!value.is_number() || value.get<double>() < 0) {
        r.error(vpath, v, "expected a non-negative number, found " + found(v));
        continue;
      }
    } else if (!v.IsScalar() || v.Scalar().empty()) {
      r.error(vpath, v, "expected a metric name, found " + found(v));
      continue;
    }
    rule.parameters[p.name] = p.default_value.is_number() ? value : nlohmann::json(v.Scalar());
  }
}

}  // namespace

// notify: {exec: [command, args...], url: http://host:port/path, timeout_s}.
void read_notify(SpecReader& r, const YAML::Node& n, const std::string& path, NotifyAction& out) {
  if (!r.expect_map(n, path)) return;
  r.check_keys(n, path, kNotifyKeys);
  if (present(n["exec"])) {
    const YAML::Node e = n["exec"];
    if (!e.IsSequence() || e.size() == 0 || e.size() > kMaxNotifyArgs) {
      r.error(path + ".exec", e, "expected a list of 1 to 64 strings: the command and its "
                                 "arguments (no shell), found " + found(e));
    } else {
      for (size_t i = 0; i < e.size(); ++i) {
        std::string arg;
        if (!r.get_string(e[i], path + ".exec[" + std::to_string(i) + "]", &arg)) return;
        out.exec.push_back(arg);
      }
      if (out.exec[0].empty()) r.error(path + ".exec[0]", e[0], "expected a command, found ''");
    }
  }
  if (present(n["url"]) && r.get_string(n["url"], path + ".url", &out.url)) {
    static const RE2 kUrl(R"(http://[A-Za-z0-9.\-\[\]:]+(/[!-~]*)?)");
    if (!RE2::FullMatch(out.url, kUrl))
      r.error(path + ".url", n["url"],
              "expected http://HOST[:PORT][/PATH] (plain http: POST to a local relay for "
              "https), found " + found(n["url"]));
  }
  if (present(n["timeout_s"]) &&
      r.get_seconds(n["timeout_s"], path + ".timeout_s", false, &out.timeout_s) &&
      out.timeout_s > 300)
    r.error(path + ".timeout_s", n["timeout_s"], "expected at most 300 seconds, found " +
                                                     found(n["timeout_s"]));
  if (!present(n["exec"]) && !present(n["url"]))
    r.error(path, n, "expected exec or url (or both), found " + found(n));
}

// action: stop | none | {stop: bool, notify: {...}}.
void read_action(SpecReader& r, const YAML::Node& n, const std::string& path, RuleSpec& rule) {
  if (!present(n)) return;
  if (n.IsScalar()) {
    const std::string action = n.Scalar();
    if (action != "none" && action != "stop")
      r.error(path, n, std::string("expected ") + kActionForms + ", found " + found(n));
    rule.stop = action == "stop";
    return;
  }
  if (!n.IsMap()) {
    r.error(path, n, std::string("expected ") + kActionForms + ", found " + found(n));
    return;
  }
  r.check_keys(n, path, kActionKeys);
  r.get_bool(n["stop"], path + ".stop", &rule.stop);
  if (present(n["notify"])) read_notify(r, n["notify"], path + ".notify", rule.notify);
}

void read_metric_definitions(SpecReader& r, const YAML::Node& n, JobSpec& spec) {
  std::vector<MetricDefinition> defs;
  if (present(n)) {
    if (!n.IsSequence()) {
      r.error("metric_definitions", n,
               "expected a list of {name, regex}, found " + found(n));
      return;
    }
    if (static_cast<int>(n.size()) > kMaxMetricDefinitions)
      r.error("metric_definitions", n,
               "expected at most " + std::to_string(kMaxMetricDefinitions) +
                   " definitions, found " + std::to_string(n.size()));
    for (size_t i = 0; i < n.size(); ++i) {
      MetricDefinition def;
      if (metric_definition(r, n[i], "metric_definitions[" + std::to_string(i) + "]", &def)) {
        const bool duplicate = std::any_of(defs.begin(), defs.end(), [&](const auto& d) {
          return d.name == def.name;
        });
        if (duplicate)
          r.error("metric_definitions[" + std::to_string(i) + "].name", n[i]["name"],
                   "expected a name not used by another definition, found '" + def.name +
                       "' again");
        else
          defs.push_back(def);
      }
    }
  }
  // entry_point is read before this, so the trainer's defaults can be added.
  if (spec.builtin_trainer())
    for (const MetricDefinition& d : builtin_metric_definitions())
      if (std::none_of(defs.begin(), defs.end(), [&](const auto& x) { return x.name == d.name; }))
        defs.push_back(d);
  spec.metric_definitions = defs;
}

void read_rules(SpecReader& r, const YAML::Node& n, JobSpec& spec) {
  if (!present(n)) return;
  spec.rules.clear();
  if (!n.IsSequence()) {
    r.error("rules", n, "expected a list of {rule, parameters, action}, found " + found(n));
    return;
  }
  std::vector<std::string> names;
  for (const RuleInfo& info : rule_catalogue()) names.push_back(info.name);
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string path = "rules[" + std::to_string(i) + "]";
    const YAML::Node entry = n[i];
    if (!entry.IsMap()) {
      r.error(path, entry, "expected {rule, parameters, action}, found " + found(entry));
      continue;
    }
    r.check_keys(entry, path, kRuleKeys);
    std::string name;
    if (!r.get_string(entry["rule"], path + ".rule", &name)) continue;
    const RuleInfo* info = find_rule(name);
    if (!info) {
      std::string all;
      for (const std::string& x : names) all += (all.empty() ? "" : ", ") + x;
      const std::string near = nearest(name, names);
      r.error(path + ".rule", entry["rule"], "expected one of " + all + ", found '" + name + "'" +
                                            (near.empty() ? "" : "; did you mean '" + near + "'?"));
      continue;
    }
    RuleSpec rule = rule_with_defaults(*info);
    read_rule_parameters(r, entry["parameters"], path, *info, rule);
    read_action(r, entry["action"], path + ".action", rule);
    spec.rules.push_back(std::move(rule));
  }
}

void read_profiler(SpecReader& r, const YAML::Node& n, JobSpec& spec) {
  if (!r.expect_map(n, "profiler")) return;
  r.check_keys(n, "profiler", kProfilerKeys);
  r.get_bool(n["enabled"], "profiler.enabled", &spec.profiler.enabled);
  r.get_seconds(n["interval_s"], "profiler.interval_s", false, &spec.profiler.interval_s);
}

}  // namespace heft::job
