// Invariant checks that stay on in release builds. A failed check throws heft::Error with
// the file, line, the condition and (for the _EQ/_LT forms) both values, plus an optional
// message built from the extra arguments: HEFT_CHECK_EQ(a, b, "while ", what).
// Use them for the library's own invariants, never for user input (that gets a named error).
#pragma once

#include <sstream>
#include <string>

#include "heft/error.h"

namespace heft::detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] void check_failed(const char* file, int line, const std::string& what);

}  // namespace heft::detail

#define HEFT_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond))                                                                       \
      ::heft::detail::check_failed(__FILE__, __LINE__,                                 \
                                   ::heft::detail::concat("check failed: " #cond " ", \
                                                          ##__VA_ARGS__));            \
  } while (0)

#define HEFT_CHECK_OP_(a, b, op, ...)                                                   \
  do {                                                                                  \
    const auto& heft_a_ = (a);                                                          \
    const auto& heft_b_ = (b);                                                          \
    if (!(heft_a_ op heft_b_))                                                          \
      ::heft::detail::check_failed(                                                     \
          __FILE__, __LINE__,                                                           \
          ::heft::detail::concat("check failed: " #a " " #op " " #b " (", heft_a_,      \
                                 " vs ", heft_b_, ") ", ##__VA_ARGS__));               \
  } while (0)

#define HEFT_CHECK_EQ(a, b, ...) HEFT_CHECK_OP_(a, b, ==, ##__VA_ARGS__)
#define HEFT_CHECK_NE(a, b, ...) HEFT_CHECK_OP_(a, b, !=, ##__VA_ARGS__)
#define HEFT_CHECK_LT(a, b, ...) HEFT_CHECK_OP_(a, b, <, ##__VA_ARGS__)
#define HEFT_CHECK_LE(a, b, ...) HEFT_CHECK_OP_(a, b, <=, ##__VA_ARGS__)
#define HEFT_CHECK_GE(a, b, ...) HEFT_CHECK_OP_(a, b, >=, ##__VA_ARGS__)
