// Which form each shared-memory allreduce took on one rank: counted by the shared-memory
// allreduce (algo/shm_allreduce.cc), read through Communicator::shm_path_counts() by tests and
// `heft bench`. Its own header so the communicator's public one need not show the transport.
#pragma once

#include <cstdint>

namespace heft::comm::shm {

struct PathCounts {
  uint64_t small = 0;        // every rank reduces whole chunks through the slots
  uint64_t slots = 0;        // reduce-scatter + allgather through the slots (two copies)
  uint64_t single_copy = 0;  // reads of the peers' buffers (cross-memory attach)
  uint64_t direct = 0;       // peers' slices only into the slots, own slice reduced in place
  uint64_t cores = 0;        // reduced on each core, then across the cores' first ranks
                             // (counted on the host's context; the steps count in their own)
  uint64_t syncs = 0;        // shared-memory synchronisations, of every collective
  uint64_t one_pass = 0;     // direct pieces reduced into the buffer and the out area at once
  uint64_t streamed = 0;     // direct pieces written into a slot area with streaming stores
  uint64_t far = 0;          // direct allreduces run for the far placement (context.h)
  uint64_t probes = 0;       // placement probes (their syncs are not in `syncs`)
  uint64_t probe_ns = 0;     // the last answered probe: ns per sync (local rank 0's)
  uint64_t unanswered = 0;   // of `probes`: ranks free to move shared a CPU or moved (context.h)
  // How the waits of those syncs for a peer ended (a peer already there counts in none):
  uint64_t spun = 0;       // within the spin budget
  uint64_t yielded = 0;    // during the sched_yield() calls after it
  uint64_t slept = 0;      // futex sleeps (each ended by the peer's wake-up or 10 ms)
  uint64_t contended = 0;  // times a slow yield made the next waits sleep at once
};

}  // namespace heft::comm::shm
