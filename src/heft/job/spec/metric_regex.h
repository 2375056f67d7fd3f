// The regular expressions users give heft (metric definitions), compiled with RE2: the
// syntax of RE2 (Perl-like: classes, groups, alternation, repetition, (?i) flags), without
// what needs backtracking (backreferences \1, look-around (?=...) (?!...) (?<=...)), so that
// matching any worker output takes time linear in its length and bounded memory.
#pragma once

#include <memory>
#include <string>

#include "heft/result.h"

namespace re2 {
class RE2;
}

namespace heft::job {

// Compiles `pattern`; the failure says why ("invalid perl operator: (?=", ...).
Result<std::unique_ptr<re2::RE2>> compile_metric_regex(const std::string& pattern);

// Capturing groups of a compiled regex.
int capturing_groups(const re2::RE2& re);

}  // namespace heft::job
