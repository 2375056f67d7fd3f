// Typed field reads, key checks and overrides for spec validation (spec_yaml.h).
#include "heft/job/spec_yaml.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "heft/job/spec.h"

namespace heft::job {

namespace {

bool parse_long(const std::string& s, long* out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty() || s.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

bool quoted(const YAML::Node& n) { return n.Tag() == "!"; }

bool is_bool_text(const std::string& s, bool* value) {
  for (const char* t : {"true", "True", "TRUE"})
    if (s == t) return *value = true, true;
  for (const char* f : {"false", "False", "FALSE"})
    if (s == f) return *value = false, true;
  return false;
}

bool is_index(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 9;
}

}  // namespace

bool present(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }

std::string found(const YAML::Node& n) {
  if (!present(n)) return "nothing";
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  const std::string& s = n.Scalar();
  double d;
  bool b;
  if (!quoted(n) && (parse_double(s, &d) || is_bool_text(s, &b))) return s;
  return "'" + s + "'";
}

nlohmann::json scalar_json(const YAML::Node& n) {
  const std::string& s = n.Scalar();
  if (quoted(n)) return s;
  bool b;
  if (is_bool_text(s, &b)) return b;
  long i;
  if (parse_long(s, &i)) return static_cast<int64_t>(i);
  double d;
  if (parse_double(s, &d)) return d;
  return s;
}

nlohmann::json yaml_to_json(const YAML::Node& n) {
  if (!present(n)) return nullptr;
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) j[kv.first.as<std::string>()] = yaml_to_json(kv.second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& item : n) j.push_back(yaml_to_json(item));
    return j;
  }
  return scalar_json(n);
}

std::string number_text(double value) {
  char buf[32];
  if (std::floor(value) == value && std::fabs(value) < 1e15)
    std::snprintf(buf, sizeof(buf), "%.0f", value);
  else
    std::snprintf(buf, sizeof(buf), "%g", value);
  return buf;
}

std::string SpecReader::where(const std::string& path, const YAML::Node& at) const {
  for (const std::string& o : overridden_)
    if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) return "--set";
  const YAML::Mark mark = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (mark.is_null()) return source_ + ":";
  return source_ + ":" + std::to_string(mark.line + 1) + ":";
}

void SpecReader::error(const std::string& path, const YAML::Node& at, const std::string& text) {
  errors_.push_back(where(path, at) + " " + (path.empty() ? "spec" : path) + ": " + text);
}

void SpecReader::check_keys(const YAML::Node& map, const std::string& path,
                            const std::vector<std::string>& known) {
  if (!map.IsMap()) return;
  std::vector<std::pair<std::string, YAML::Mark>> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    const auto first = std::find_if(seen.begin(), seen.end(),
                                    [&](const auto& s) { return s.first == key; });
    if (first != seen.end()) {
      // YAML readers keep one of the two silently; which one the user meant is unknowable.
      error(path.empty() ? key : path + "." + key, kv.first,
            "given twice (first on line " + std::to_string(first->second.line + 1) +
                "); expected each field once");
      continue;
    }
    seen.emplace_back(key, kv.first.Mark());
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string full = path.empty() ? key : path + "." + key;
    const std::string suggestion = nearest(key, known);
    std::string text = "unknown field";
    if (!suggestion.empty()) {
      text += "; did you mean '" + suggestion + "'?";
    } else {
      text += "; expected one of";
      for (size_t i = 0; i < known.size(); ++i) text += (i ? ", " : " ") + known[i];
    }
    error(full, kv.first, text);
  }
}

bool SpecReader::expect_map(const YAML::Node& n, const std::string& path) {
  if (!present(n)) return false;
  if (n.IsMap()) return true;
  error(path, n, "expected a map, found " + found(n));
  return false;
}

bool SpecReader::get_int(const YAML::Node& n, const std::string& path, long min, long max,
                         int* out) {
  if (!present(n)) return false;
  long v = 0;
  const bool number = n.IsScalar() && !quoted(n) && parse_long(n.Scalar(), &v);
  const std::string range = max >= (1L << 30) ? "an integer >= " + std::to_string(min)
                                              : "an integer from " + std::to_string(min) +
                                                    " to " + std::to_string(max);
  if (!number || v < min || v > max) {
    error(path, n, "expected " + range + ", found " + found(n));
    return false;
  }
  *out = static_cast<int>(v);
  return true;
}

bool SpecReader::get_bool(const YAML::Node& n, const std::string& path, bool* out) {
  if (!present(n)) return false;
  bool v = false;
  if (!n.IsScalar() || quoted(n) || !is_bool_text(n.Scalar(), &v)) {
    error(path, n, "expected true or false, found " + found(n));
    return false;
  }
  *out = v;
  return true;
}

bool SpecReader::get_seconds(const YAML::Node& n, const std::string& path, bool allow_zero,
                             double* out) {
  if (!present(n)) return false;
  double v = 0;
  const bool number = n.IsScalar() && !quoted(n) && parse_double(n.Scalar(), &v);
  if (!number || v < 0 || (v == 0 && !allow_zero)) {
    error(path, n, std::string("expected a number of seconds ") +
                       (allow_zero ? ">= 0" : "> 0") + ", found " + found(n));
    return false;
  }
  *out = v;
  return true;
}

bool SpecReader::get_string(const YAML::Node& n, const std::string& path, std::string* out) {
  if (!present(n) || !n.IsScalar()) {
    error(path, n, "expected a string, found " + found(n));
    return false;
  }
  *out = n.Scalar();
  return true;
}

void SpecReader::apply_override(YAML::Node& root, const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    errors_.push_back("--set '" + text + "': expected key.path=value, such as "
                      "cluster.instance_count=2");
    return;
  }
  const std::string path = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  std::vector<std::string> segments;
  for (size_t begin = 0;;) {
    const size_t dot = path.find('.', begin);
    segments.push_back(path.substr(begin, dot - begin));
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  for (const std::string& s : segments)
    if (s.empty()) {
      errors_.push_back("--set '" + text + "': expected key.path=value with no empty key");
      return;
    }
  YAML::Node value_node;
  try {
    value_node = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    errors_.push_back("--set " + path + ": expected a YAML value, found '" + value + "' (" +
                      e.msg + ")");
    return;
  }
  YAML::Node cur = root;
  std::string shown;  // the path so far, in message form
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string& seg = segments[i];
    const bool last = i + 1 == segments.size();
    if (cur.IsSequence()) {
      if (!is_index(seg) || std::stoul(seg) > cur.size() ||
          (!last && std::stoul(seg) == cur.size())) {
        errors_.push_back("--set " + path + ": expected an index below " +
                          std::to_string(cur.size()) + " into the list " + shown + ", found '" +
                          seg + "'");
        return;
      }
      const size_t index = std::stoul(seg);
      shown += "[" + seg + "]";
      if (last) {
        if (index == cur.size())
          cur.push_back(value_node);
        else
          cur[index] = value_node;
      } else {
        YAML::Node next = cur[index];
        cur.reset(next);
      }
      continue;
    }
    if (cur.IsDefined() && !cur.IsNull() && !cur.IsMap()) {
      errors_.push_back("--set " + path + ": " + shown + " is a value, not a map");
      return;
    }
    shown += (shown.empty() ? "" : ".") + seg;
    if (last) {
      cur[seg] = value_node;
    } else {
      YAML::Node next = cur[seg];
      cur.reset(next);
    }
  }
  overridden_.push_back(shown);
}

std::string SpecReader::message() const {
  std::string out;
  for (size_t i = 0; i < errors_.size(); ++i) out += (i ? "\n" : "") + errors_[i];
  return out;
}

}  // namespace heft::job
