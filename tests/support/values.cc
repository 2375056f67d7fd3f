#include "support/values.h"

#include <cstring>

#include "heft/error.h"

namespace heft::test {

void Buffer::set(size_t i, double v) { comm::write_element(at(i), type_, v); }

double Buffer::get(size_t i) const {
  return comm::read_element(bytes_.data() + i * comm::element_size(type_), type_);
}

void fail_values(const std::string& what, size_t first_bad, double got, double want,
                 double largest_diff, size_t bad) {
  throw Error(what + ": " + std::to_string(bad) + " elements wrong; first at index " +
              std::to_string(first_bad) + " (got " + std::to_string(got) + ", expected " +
              std::to_string(want) + "); largest difference " + std::to_string(largest_diff));
}

}  // namespace heft::test
