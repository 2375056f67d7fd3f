"""tsm.state: what tsm.init set up, under the library v2's property names (rank, world_size,
tp_size, tp_rank, tp_process_group, tensor_parallel_degree, hybrid_shard_degree,
rep_rank_process_group) plus heft's (local_rank, dp_rank, dp_size, dp_process_group,
dp_mesh, mesh, config). One object, filled by tsm.init; read before it, a property raises
RuntimeError saying so."""

_FIELDS = {
    "rank": "this rank in the world, [0, world_size)",
    "world_size": "the ranks of the job",
    "local_rank": "this rank on its host (LOCAL_RANK)",
    "tensor_parallel_degree": "tp: the ranks splitting each layer",
    "tp_size": "tensor_parallel_degree, the library's alias",
    "tp_rank": "this rank in its tensor group, [0, tp_size)",
    "tp_process_group": "the tensor group: consecutive ranks, the same data index",
    "dp_size": "the data-parallel world: world_size / tp_size",
    "dp_rank": "this rank's data index, [0, dp_size): which share of the global batch",
    "dp_process_group": "the data group: the ranks with this rank's tp_rank",
    "hybrid_shard_degree": "the shard group size inside the data group (0 in the config: dp_size)",
    "rep_rank_process_group": "the ranks of this rank's replica: its shard groups x their "
                              "tensor groups (the whole world without replicas)",
    "dp_mesh": "torch's DeviceMesh over the data group for fully_shard: 1-D ('shard') without "
               "replicas, else 2-D ('replicate', 'shard'), FSDP2's hybrid sharding",
    "mesh": "heft's DeviceMesh(tensor=tp, sharded=hybrid_shard_degree), which owns the groups",
    "config": "the honoured keys with their values, defaults filled in",
}


class State:
    """Filled by tsm.init (every field above); each attribute raises RuntimeError before it."""

    def __init__(self):
        object.__setattr__(self, "_values", None)

    def _fill(self, values):
        missing = set(_FIELDS) - set(values)
        assert not missing, missing
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        if name.startswith("_") or name not in _FIELDS:
            raise AttributeError(f"tsm.state has no attribute {name!r} (it has "
                                 f"{', '.join(_FIELDS)})")
        if self._values is None:
            raise RuntimeError(f"tsm.state.{name}: call tsm.init() first")
        return self._values[name]

    def __setattr__(self, name, value):
        raise AttributeError("tsm.state is read-only: tsm.init() sets it")

    def __dir__(self):
        return list(_FIELDS)

    def __repr__(self):
        if self._values is None:
            return "tsm.state (not initialized: call tsm.init())"
        v = self._values
        return (f"tsm.state(rank={v['rank']}/{v['world_size']}, tp {v['tp_rank']}/{v['tp_size']}, "
                f"dp {v['dp_rank']}/{v['dp_size']}, hybrid_shard_degree="
                f"{v['hybrid_shard_degree']})")
