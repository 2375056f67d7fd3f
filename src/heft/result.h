// Result values for expected failures in every layer (a bad spec, a missing job, a name
// already taken, a bad hyperparameter): docs/errors.md says these are values, not exceptions. A
// Result either holds a value or the product text of the error (what a command prints
// after its name: "spec.yaml:3: cluster.instance_count: expected ...").
//
// Deliberately left out: error codes and chaining; the message is the whole contract.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "heft/check.h"

namespace heft {

template <class T>
class [[nodiscard]] Result {
 public:
  static Result success(T value) { return Result(std::move(value), {}); }
  static Result failure(std::string message) { return Result(std::nullopt, std::move(message)); }

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  // The value; a HEFT_CHECK failure when !ok().
  const T& value() const& {
    HEFT_CHECK(ok(), "Result::value() on an error: ", error_);
    return *value_;
  }
  T& value() & {
    HEFT_CHECK(ok(), "Result::value() on an error: ", error_);
    return *value_;
  }
  T&& value() && {
    HEFT_CHECK(ok(), "Result::value() on an error: ", error_);
    return std::move(*value_);
  }
  // The message; empty when ok().
  const std::string& error() const { return error_; }

 private:
  Result(std::optional<T> value, std::string error)
      : value_(std::move(value)), error_(std::move(error)) {}
  std::optional<T> value_;
  std::string error_;
};

// A Result without a value: success, or an error message.
class [[nodiscard]] Status {
 public:
  static Status success() { return Status({}); }
  static Status failure(std::string message) { return Status(std::move(message)); }
  bool ok() const { return error_.empty(); }
  explicit operator bool() const { return ok(); }
  const std::string& error() const { return error_; }

 private:
  explicit Status(std::string error) : error_(std::move(error)) {}
  std::string error_;
};

}  // namespace heft
