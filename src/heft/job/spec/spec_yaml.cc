// Typed field reads, key checks and overrides for spec validation (spec_yaml.h).
#include "heft/job/spec/spec_yaml.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unordered_map>

#include "heft/job/spec/spec.h"

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
  if (errors_.size() >= kMaxSpecErrors) {
    ++dropped_;
    return;
  }
  errors_.push_back(where(path, at) + " " + (path.empty() ? "spec" : path) + ": " + text);
}

void SpecReader::check_keys(const YAML::Node& map, const std::string& path,
                            const std::vector<std::string>& known) {
  if (!map.IsMap()) return;
  // Linear in the keys: a spec of many unknown keys costs one hash lookup each.
  std::unordered_map<std::string, YAML::Mark> seen;
  for (const auto& kv : map) {
    const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : found(kv.first);
    const auto [first, inserted] = seen.emplace(key, kv.first.Mark());
    if (!inserted) {
      // YAML readers keep one of the two silently; which one the user meant is unknowable.
      error(path.empty() ? key : path + "." + key, kv.first,
            "given twice (first on line " + std::to_string(first->second.line + 1) +
                "); expected each field once");
      continue;
    }
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    if (errors_.size() >= kMaxSpecErrors) {  // no "did you mean" for messages dropped anyway
      ++dropped_;
      continue;
    }
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

namespace {

// A --set override's parts: "key.path=value" split at the first '=' and the key at its dots.
struct Override {
  std::string path, value;
  std::vector<std::string> segments;
};

// The override's parts, or why it is malformed (too long, no key, an empty key).
Result<Override> split_override(const std::string& text) {
  if (text.size() > kMaxOverrideBytes)
    return Result<Override>::failure("--set '" + text.substr(0, 40) + "...': expected at most " +
                                     std::to_string(kMaxOverrideBytes) + " bytes, found " +
                                     std::to_string(text.size()));
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    return Result<Override>::failure("--set '" + text + "': expected key.path=value, such as "
                                     "cluster.instance_count=2");
  Override o{text.substr(0, eq), text.substr(eq + 1), {}};
  for (size_t begin = 0;;) {
    const size_t dot = o.path.find('.', begin);
    o.segments.push_back(o.path.substr(begin, dot - begin));
    if (o.segments.back().empty())
      return Result<Override>::failure("--set '" + text +
                                       "': expected key.path=value with no empty key");
    if (dot == std::string::npos) break;
    begin = dot + 1;
  }
  return Result<Override>::success(std::move(o));
}

}  // namespace

void SpecReader::apply_override(YAML::Node& root, const std::string& text) {
  Result<Override> parts = split_override(text);
  if (!parts.ok()) {
    errors_.push_back(parts.error());
    return;
  }
  const std::string& path = parts.value().path;
  const std::string& value = parts.value().value;
  const std::vector<std::string>& segments = parts.value().segments;
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
  if (dropped_ > 0)
    out += "\n... and " + std::to_string(dropped_) + " more problem" +
           (dropped_ == 1 ? "" : "s") + " (the first " + std::to_string(kMaxSpecErrors) +
           " are listed)";
  return out;
}

namespace {

// How deep [ and { may nest in the text (yaml-cpp's parser recurses on them).
constexpr int kMaxFlowNesting = 256;

// Line and column (from 1) where flow collections first nest deeper than kMaxFlowNesting,
// outside quotes and comments; nothing when they never do.
std::optional<std::pair<int, int>> first_too_deep(const std::string& text) {
  int depth = 0, line = 1, column = 0;
  char quote = 0;
  bool comment = false;
  for (char c : text) {
    ++column;
    if (c == '\n') {
      ++line;
      column = 0;
      comment = false;
      continue;
    }
    if (comment) continue;
    if (quote) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    else if (c == '#') comment = true;
    else if (c == '[' || c == '{') {
      if (++depth > kMaxFlowNesting) return std::make_pair(line, column);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// One walk over the document as the readers will see it: aliases are followed (yaml-cpp
// shares the aliased node), so a small text can stand for a huge or cyclic tree. The walk
// counts nodes up to a budget and keeps the maps and lists above the current one, so it
// stops at the first node past the budget, the first cycle, or the first level too deep.
class DocumentWalk {
 public:
  explicit DocumentWalk(SpecReader& reader) : r_(reader) {}

  bool walk(const YAML::Node& n, const std::string& path) {
    if (++nodes_ > kMaxSpecNodes) {
      r_.error(path, n, "the spec expands to more than " + std::to_string(kMaxSpecNodes) +
                            " values here (YAML aliases repeating a map or list?); expected a "
                            "spec of at most that many");
      return false;
    }
    if (!n.IsMap() && !n.IsSequence()) return true;
    for (const YAML::Node& a : above_)
      if (a.is(n)) {
        r_.error(path, n, "an alias inside the map or list it names (a cycle); expected a tree");
        return false;
      }
    if (above_.size() >= kMaxSpecDepth) {
      r_.error(path, n, "maps and lists nest deeper than " + std::to_string(kMaxSpecDepth) +
                            " levels; expected a shallower spec");
      return false;
    }
    above_.push_back(n);
    bool ok = true;
    if (n.IsMap()) {
      for (const auto& kv : n) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        const std::string child = path.empty() ? key : path + "." + key;
        ok = walk(kv.first, child) && walk(kv.second, child);
        if (!ok) break;
      }
    } else {
      size_t i = 0;
      for (const auto& item : n) {
        ok = walk(item, path + "[" + std::to_string(i++) + "]");
        if (!ok) break;
      }
    }
    above_.pop_back();
    return ok;
  }

 private:
  SpecReader& r_;
  size_t nodes_ = 0;
  std::vector<YAML::Node> above_;
};

}  // namespace

Result<std::string> read_spec_text(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::ifstream in(path, std::ios::binary);
  if (!in || fs::is_directory(path, ec)) {
    const std::string why = fs::exists(path, ec) ? (fs::is_directory(path, ec)
                                                        ? "it is a directory"
                                                        : "permission denied")
                                                 : "no such file";
    return Result<std::string>::failure("cannot read " + what + " '" + path + "': " + why);
  }
  std::string text(kMaxSpecBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxSpecBytes) {
    const auto size = fs::file_size(path, ec);
    return Result<std::string>::failure(
        path + ": " + what + " holds " + (ec ? "more than " + std::to_string(kMaxSpecBytes)
                                             : std::to_string(size)) +
        " bytes; expected at most " + std::to_string(kMaxSpecBytes) + " (a spec is a page of "
        "YAML: large values belong in files the job reads)");
  }
  return Result<std::string>::success(std::move(text));
}

Result<YAML::Node> load_spec_document(const std::string& text, const std::string& source,
                                      const std::vector<std::string>& overrides,
                                      SpecReader& reader) {
  if (text.size() > kMaxSpecBytes)
    return Result<YAML::Node>::failure(source + ": holds " + std::to_string(text.size()) +
                                       " bytes; expected at most " +
                                       std::to_string(kMaxSpecBytes));
  if (overrides.size() > kMaxOverrides)
    return Result<YAML::Node>::failure("--set: given " + std::to_string(overrides.size()) +
                                       " times; expected at most " +
                                       std::to_string(kMaxOverrides));
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // yaml-cpp says "bad file" when flow collections nest too deep: say where and how deep.
    if (const auto deep = first_too_deep(text))
      return Result<YAML::Node>::failure(source + ":" + std::to_string(deep->first) + ":" +
                                         std::to_string(deep->second) +
                                         ": not valid YAML: [ and { nest deeper than " +
                                         std::to_string(kMaxFlowNesting) + " levels here");
    return Result<YAML::Node>::failure(source + ":" + std::to_string(e.mark.line + 1) + ":" +
                                       std::to_string(e.mark.column + 1) +
                                       ": not valid YAML: " + e.msg);
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // The file alone first: an alias bomb is refused before --set walks into it.
  if (!DocumentWalk(reader).walk(root, "")) return Result<YAML::Node>::failure(reader.message());
  for (const std::string& o : overrides) reader.apply_override(root, o);
  if (reader.has_errors()) return Result<YAML::Node>::failure(reader.message());
  if (!overrides.empty() && !DocumentWalk(reader).walk(root, ""))
    return Result<YAML::Node>::failure(reader.message());
  return Result<YAML::Node>::success(root);
}

}  // namespace heft::job
