#include "heft/comm/algo/hierarchical_allreduce.h"

#include "heft/comm/algo/recursive_doubling_allreduce.h"
#include "heft/comm/algo/ring_allreduce.h"
#include "heft/comm/algo/shm_allreduce.h"
#include "heft/comm/algo/shm_collectives.h"
#include "heft/comm/reduce.h"

namespace heft::comm::algo {

namespace {

void cross_host(Links& links, void* buf, size_t count, DataType t, ReduceOp op,
                size_t small_bytes) {
  if (count * element_size(t) <= small_bytes) recursive_doubling_allreduce(links, buf, count, t, op);
  else ring_allreduce(links, buf, count, t, op);
}

}  // namespace

void hierarchical_allreduce(Transport& tcp, shm::Context* shm, const Topology& topo, void* buf,
                            size_t count, DataType t, ReduceOp op, size_t small_bytes,
                            Deadline deadline, const std::string& name) {
  // Partial steps sum; the division for avg happens once, over the whole world.
  const ReduceOp partial = op == ReduceOp::avg ? ReduceOp::sum : op;
  const int world = static_cast<int>(topo.host_of_rank.size());
  const CallSignature call = call_signature(Call::allreduce, count, t, op);
  if (topo.uniform() && shm) {
    ShmLinks local{*shm, deadline, name, call};
    Links column(tcp, deadline, name, topo.column(topo.local_rank), call);
    shm_allreduce(local, buf, count, t, partial, ShmStep::kDirect, /*far=*/false, 1,
                  [&](uint8_t* slice, size_t n) {
                    cross_host(column, slice, n, t, partial, small_bytes);
                    finish_average(slice, n, t, op, world);
                  });
    return;
  }
  if (shm) {
    ShmLinks local{*shm, deadline, name,
                   call_signature(Call::hierarchical_reduce, count, t, op)};
    shm_reduce(local, buf, buf, count, t, partial, 0, 1);
  }
  if (topo.local_rank == 0 && topo.hosts() > 1) {
    Links leaders(tcp, deadline, name, topo.leaders(), call);
    cross_host(leaders, buf, count, t, partial, small_bytes);
  }
  if (shm) {
    ShmLinks local{*shm, deadline, name,
                   call_signature(Call::hierarchical_broadcast, count, t, op)};
    shm_broadcast(local, buf, count * element_size(t), 0);
  }
  finish_average(buf, count, t, op, world);
}

void core_grouped_allreduce(shm::Context* core, shm::Context* leaders, void* buf, size_t count,
                            DataType t, ReduceOp op, size_t small_bytes, int world_size,
                            Deadline deadline, const std::string& name) {
  // Partial steps combine; the division for avg happens once, on each core's first rank.
  const ReduceOp partial = op == ReduceOp::avg ? ReduceOp::sum : op;
  const size_t bytes = count * element_size(t);
  if (core) {
    ShmLinks local{*core, deadline, name,
                   call_signature(Call::hierarchical_reduce, count, t, op)};
    shm_reduce(local, buf, buf, count, t, partial, 0, 1);
  }
  if (leaders) {
    ShmLinks across{*leaders, deadline, name, call_signature(Call::allreduce, count, t, op)};
    // The cores' first ranks: small, else the direct form on the stores their placement
    // wants (cores_far() probed it for this call).
    const ShmStep step = bytes <= small_bytes ? ShmStep::kSmall : ShmStep::kDirect;
    const bool far = step == ShmStep::kDirect && across.far(bytes);
    shm_allreduce(across, buf, count, t, partial, step, far, 1);
    finish_average(buf, count, t, op, world_size);
  }
  if (core) {
    ShmLinks local{*core, deadline, name,
                   call_signature(Call::hierarchical_broadcast, count, t, op)};
    shm_broadcast(local, buf, bytes, 0);
  }
}

}  // namespace heft::comm::algo
