// A multi-writer checkpoint saved by every rank of a group (checkpoint_dir.h): each rank writes
// its part, the group passes a barrier (every part is in), rank 0 commits, and a second
// barrier lets no rank go on before the checkpoint is visible. A rank that dies in between
// makes the barrier raise heft::PeerLost on the others and nothing is committed: the
// previous checkpoint stays the newest.
#pragma once

#include <map>
#include <string>

#include "heft/parallel/checkpoint_dir.h"
#include "heft/parallel/process_group.h"

namespace heft::parallel {

// Collective over `group`: every rank passes its own files; meta_json is rank 0's.
void save_collective(ProcessGroup& group, const CheckpointDirectory& dir, int64_t step,
                     const std::string& meta_json,
                     const std::map<std::string, std::string>& files);

}  // namespace heft::parallel
