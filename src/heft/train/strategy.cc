// make_strategy and mesh_shape (strategy.h): the strategy and the mesh a resolved
// distribution asks for. The strategies are one file each: data_parallel_strategy.cc,
// sharded_strategy.cc, pipeline_strategy.cc; mesh_strategy.h holds what they share.
#include "heft/train/strategy.h"

#include "heft/error.h"
#include "heft/train/data_parallel_strategy.h"
#include "heft/train/pipeline_strategy.h"
#include "heft/train/sharded_strategy.h"

namespace heft::train {

parallel::MeshShape mesh_shape(const config::Distribution& distribution, int world) {
  if (const Status fits = distribution.check_world(world); !fits.ok())
    throw InvalidArgument(fits.error());
  const config::ModelParallel& mp = distribution.modelparallel;
  parallel::MeshShape shape;
  shape.tensor = mp.tensor_parallel_degree;
  shape.pipeline = mp.partitions;
  shape.data = world / (shape.tensor * shape.pipeline);
  if (mp.sharded_data_parallel_degree > 1) shape.shard = mp.sharded_data_parallel_degree;
  shape.placement = mp.placement_strategy;
  return shape;
}

std::unique_ptr<Strategy> make_strategy(const config::Distribution& distribution,
                                        const Hyperparameters& hp, parallel::DeviceMesh& mesh,
                                        std::shared_ptr<Model> model,
                                        const OptimizerConfig& optimizer) {
  const config::ModelParallel& mp = distribution.modelparallel;
  if (mp.partitions > 1) return make_pipeline_strategy(hp, mp, mesh, std::move(model), optimizer);
  if (mp.sharded_data_parallel_degree > 1)
    return make_sharded_strategy(hp, mp, mesh, std::move(model), optimizer);
  return make_data_parallel_strategy(hp, mp, mesh, std::move(model), optimizer);
}

}  // namespace heft::train
