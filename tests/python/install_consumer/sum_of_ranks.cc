// A worker of an installed heft: joins its group (heft::comm::init, from `heft run`'s
// environment), all-reduces its rank and prints the sum and the allreduce path.
#include <heft/comm/init.h>

#include <cstdio>

int main() {
  heft::comm::World world = heft::comm::init();
  double rank = world.comm->rank();
  world.comm->allreduce(&rank, 1, heft::comm::DataType::f64, heft::comm::ReduceOp::sum);
  std::printf("rank %d of %d: sum=%g path=%s\n", world.comm->rank(), world.comm->size(), rank,
              world.comm->last_allreduce_path().c_str());
  return 0;
}
