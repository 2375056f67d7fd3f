#include "heft/parallel/checkpoint_collective.h"

namespace heft::parallel {

void save_collective(ProcessGroup& group, const CheckpointDirectory& dir, int64_t step,
                     const std::string& meta_json,
                     const std::map<std::string, std::string>& files) {
  dir.save_part(step, group.rank(), files);
  group.barrier();  // every part is in
  if (group.rank() == 0) dir.commit(step, group.size(), meta_json);
  group.barrier();  // visible before anyone goes on
}

}  // namespace heft::parallel
