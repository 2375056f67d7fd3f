// Typed test buffers: write and read elements of any comm::DataType as double, so tests can
// state expected results in closed form once for all dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heft/comm/dtype.h"

namespace heft::test {

class Buffer {
 public:
  Buffer(comm::DataType t, size_t count) : type_(t), count_(count), bytes_(count * comm::element_size(t) + 1) {}
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t count() const { return count_; }
  comm::DataType type() const { return type_; }
  void set(size_t i, double v);
  double get(size_t i) const;
  // Address of element i (for in-place sub-buffers).
  void* at(size_t i) { return bytes_.data() + i * comm::element_size(type_); }

 private:
  comm::DataType type_;
  size_t count_;
  std::vector<uint8_t> bytes_;  // +1 so data() is never null for count 0
};

// Throws heft::Error describing the first mismatch and the largest difference when any
// element i of b differs from expected(i).
template <typename F>
void expect_values(const Buffer& b, size_t count, F expected, const std::string& what);

void fail_values(const std::string& what, size_t first_bad, double got, double want,
                 double largest_diff, size_t bad);

template <typename F>
void expect_values(const Buffer& b, size_t count, F expected, const std::string& what) {
  size_t bad = 0, first = 0;
  double largest = 0, got0 = 0, want0 = 0;
  for (size_t i = 0; i < count; ++i) {
    const double got = b.get(i), want = expected(i);
    const double diff = got > want ? got - want : want - got;
    if (diff > 0) {
      if (bad++ == 0) {
        first = i;
        got0 = got;
        want0 = want;
      }
      largest = diff > largest ? diff : largest;
    }
  }
  if (bad) fail_values(what, first, got0, want0, largest, bad);
}

}  // namespace heft::test
