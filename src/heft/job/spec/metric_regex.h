// The regular expressions users give heft (metric definitions), compiled with RE2: the
// syntax of RE2 (Perl-like: classes, groups, alternation, repetition, (?i) flags), without
// what needs backtracking (backreferences \1, look-around (?=...) (?!...) (?<=...)), so that
// matching any worker output takes time linear in its length and bounded memory.
#pragma once

#include <memory>
#include <string>

namespace re2 {
class RE2;
}

namespace heft::job {

// Compiles `pattern`. On success returns it and leaves `error` empty; else returns null and
// says why in `error` ("invalid perl operator: (?=", ...).
std::unique_ptr<re2::RE2> compile_metric_regex(const std::string& pattern, std::string* error);

// Capturing groups of a compiled regex.
int capturing_groups(const re2::RE2& re);

}  // namespace heft::job
