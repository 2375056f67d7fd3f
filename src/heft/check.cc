#include "heft/check.h"

namespace heft::detail {

void check_failed(const char* file, int line, const std::string& what) {
  throw Error(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

}  // namespace heft::detail
