#include "heft/comm/allreduce_plan.h"

#include <algorithm>
#include <cmath>

namespace heft::comm {

const char* name(ShmStep s) {
  switch (s) {
    case ShmStep::kNone: return "none";
    case ShmStep::kSmall: return "small";
    case ShmStep::kDirect: return "direct";
    case ShmStep::kSlots: return "slots";
    case ShmStep::kSingleCopy: return "single_copy";
    case ShmStep::kCores: return "cores";
  }
  return "?";
}

std::string AllreducePlan::path() const {
  switch (algorithm) {
    case Algorithm::kShm: return std::string("shm/") + name(shm);
    case Algorithm::kHierarchical:
      return shm == ShmStep::kNone ? "hierarchical(leaders)"
                                   : std::string("hierarchical(shm/") + name(shm) + ")";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
    case Algorithm::kRing: return "ring";
    default: return "";
  }
}

int far_reading_bucket(uint64_t ns) {
  if (ns == 0) return 0;
  return std::min(63, static_cast<int>(std::floor(2.0 * std::log2(static_cast<double>(ns)))));
}

ShmStep flat_shm_step(size_t bytes, size_t small_bytes, CommunicatorOptions::ShmForm form,
                      bool single_copy_available) {
  if (bytes <= small_bytes) return ShmStep::kSmall;
  switch (form) {
    case CommunicatorOptions::ShmForm::kSlots: return ShmStep::kSlots;
    case CommunicatorOptions::ShmForm::kSingleCopy:
      return single_copy_available ? ShmStep::kSingleCopy : ShmStep::kDirect;
    default: return ShmStep::kDirect;  // by the byte model in docs/comm.md, never measured
  }
}

}  // namespace heft::comm
