// The YAML side of spec validation (spec.cc): typed reads of one field that record a message
// naming the field, what was expected and what was found; unknown-key checks with a
// nearest-key suggestion; `--set key.path=value` overrides applied to the tree. Internal to
// the job layer.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "heft/result.h"

namespace heft::job {

// What one spec may hold (docs/jobs.md, "Limits"): a spec is a page of YAML, and a reader that
// takes more is a reader that a hostile file can stall or exhaust.
inline constexpr size_t kMaxSpecBytes = 1 << 20;        // a spec file or template
inline constexpr size_t kMaxOverrideBytes = 64 << 10;   // one --set key.path=value
inline constexpr size_t kMaxOverrides = 256;            // --set options in one command
inline constexpr size_t kMaxSpecNodes = 100000;         // nodes, every alias expanded
inline constexpr size_t kMaxSpecDepth = 64;             // maps and lists inside each other
inline constexpr size_t kMaxSpecErrors = 20;            // messages listed; the rest counted

// Collects the problems found in one spec. Every get_* reads an optional field: an absent
// or null node leaves *out as it is and returns false without a message; a node of the
// wrong kind or out of range records a message and returns false.
class SpecReader {
 public:
  explicit SpecReader(std::string source) : source_(std::move(source)) {}

  // Records "<where> <path>: <text>" (see spec.cc for <where>).
  void error(const std::string& path, const YAML::Node& at, const std::string& text);
  // Records one message for every key of `map` outside `known`, suggesting the nearest.
  void check_keys(const YAML::Node& map, const std::string& path,
                  const std::vector<std::string>& known);
  // True when `n` is present and a map; present and not a map is an error.
  bool expect_map(const YAML::Node& n, const std::string& path);
  bool get_int(const YAML::Node& n, const std::string& path, long min, long max, int* out);
  bool get_bool(const YAML::Node& n, const std::string& path, bool* out);
  // A non-negative finite number of seconds; zero only when allow_zero.
  bool get_seconds(const YAML::Node& n, const std::string& path, bool allow_zero,
                   double* out);
  // Any scalar as text; unlike the others, an absent or null node is an error.
  bool get_string(const YAML::Node& n, const std::string& path, std::string* out);

  // Applies "key.path=value" to `root` (a map), remembering the path so that messages
  // about it say "--set" instead of a line of the file. A malformed override is an error.
  void apply_override(YAML::Node& root, const std::string& text);

  // The messages kept (at most kMaxSpecErrors); has_errors() counts the rest too.
  const std::vector<std::string>& errors() const { return errors_; }
  bool has_errors() const { return !errors_.empty(); }
  // Every message kept, one a line, then "... and N more problems" when some were dropped.
  std::string message() const;

 private:
  std::string where(const std::string& path, const YAML::Node& at) const;

  std::string source_;
  std::vector<std::string> overridden_;  // paths set by --set, in message form
  std::vector<std::string> errors_;
  size_t dropped_ = 0;  // messages past kMaxSpecErrors
};

// The text of the spec file `path` ("the spec", "the tuning spec", "the template" in
// messages as `what`): an error naming the file when it cannot be read or holds more than
// kMaxSpecBytes (the file is not read past that).
Result<std::string> read_spec_text(const std::string& path, const std::string& what);

// Parses `text` (named `source` in messages), applies `overrides` (--set; each at most
// kMaxOverrideBytes, at most kMaxOverrides) through `reader`, and checks the whole document
// before any field is converted: at most kMaxSpecNodes nodes with every alias expanded, no
// alias inside the map or list it names (a cycle), at most kMaxSpecDepth levels. An empty
// document is an empty map. On failure the error is the whole message (YAML syntax, or the
// reader's messages).
Result<YAML::Node> load_spec_document(const std::string& text, const std::string& source,
                                      const std::vector<std::string>& overrides,
                                      SpecReader& reader);

// Present: defined and not null.
bool present(const YAML::Node& n);
// How a message shows what it found: nothing, a map, a list, 0, 'two'.
std::string found(const YAML::Node& n);
// A scalar as JSON: quoted text stays a string; true/false, integers and decimals typed.
nlohmann::json scalar_json(const YAML::Node& n);
// A whole tree as JSON (maps to objects, lists to arrays, scalars as scalar_json).
nlohmann::json yaml_to_json(const YAML::Node& n);
// 3600, 0.5, 1e+09: a number as messages show it.
std::string number_text(double value);

}  // namespace heft::job
