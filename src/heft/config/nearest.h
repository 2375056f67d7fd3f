// The "did you mean" of every configuration error: the known name nearest a mistyped one.
#pragma once

#include <string>
#include <vector>

namespace heft::config {

// Optimal-string-alignment edit distance (insertions, deletions, substitutions and adjacent
// transpositions each cost 1).
int edit_distance(const std::string& a, const std::string& b);

// The candidate nearest `word` by edit distance (adjacent swaps count as one edit), or ""
// when even the nearest is more than a typo away (max(2, a third of the word's length)).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace heft::config
