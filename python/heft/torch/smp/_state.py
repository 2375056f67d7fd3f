"""smp.init and what it sets up: the library's parameters read by the job spec's own rules (the
C++ config::Distribution through _c10d.model_parallel_parameters), heft's DeviceMesh
(pipeline = partitions, the rest data, laid out by placement_strategy), and the ranks and
groups the library's functions report."""
import enum
import json
import os

import torch
import torch.distributed as dist

from heft.torch import _c10d
from heft.torch import distributed as _hdist
from heft.torch.parallel import DeviceMesh

ENV = "SM_HP_MP_PARAMETERS"
MAX_CONFIG_BYTES = 1 << 20

# Knobs of heft's reading that this API does not run (yet), with why; refused when not at
# their default, naming the key.
_REFUSED = {
    "tensor_parallel_degree": (1, "the v1 API's tensor parallelism (smp.tensor_parallelism, "
                                  "its distributed modules) is not on heft; use "
                                  "heft.torch.sagemaker (tsm, the v2 API) or "
                                  "heft.torch.parallel.tensor_parallel"),
    "sharded_data_parallel_degree": (1, "sharded data parallelism is not on heft's v1 API; use "
                                        "heft.torch.parallel.ShardedDataParallel or tsm's "
                                        "hybrid_shard_degree"),
    "bf16": (False, "the v1 API runs the model in the dtype it was built in on heft; build it "
                    "in bfloat16, or use torch.autocast in the step function"),
    "auto_layout": (False, "heft-train's layout search (docs/auto-layout.md) is not on the v1 "
                           "API"),
}


class CommGroup(enum.Enum):
    WORLD = 0
    MP_GROUP = 1
    DP_GROUP = 2


class RankType(enum.Enum):
    WORLD_RANK = 0
    MP_RANK = 1
    DP_RANK = 2


class _State:
    def __init__(self):
        self.config = None  # heft's reading of the parameters (dict), None before init
        self.mesh = None
        self.random_seed = None

    def need(self, what):
        if self.config is None:
            raise RuntimeError(f"smp.{what}: call smp.init() first")
        return self


state = _State()


def _source(config):
    if isinstance(config, dict):
        return dict(config), "the config dict"
    if config is not None:
        raise TypeError(f"smp.init: config={config!r}: expected a dict of the library's "
                        f"parameters, or None (then {ENV})")
    text = os.environ.get(ENV, "")
    if len(text) > MAX_CONFIG_BYTES:
        raise ValueError(f"smp.init: {ENV} holds {len(text)} bytes, more than the limit of "
                         f"{MAX_CONFIG_BYTES}")
    if not text.strip():
        return {}, ENV
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"smp.init: {ENV} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"smp.init: {ENV} holds a JSON {type(value).__name__}, expected an "
                         "object of the library's parameters")
    return value, ENV


def read(config, world=0):
    """(heft's reading of the parameters, random_seed): ValueError naming each key heft
    refuses, led by where the parameters came from; with world > 0 the degrees are checked
    against it too."""
    given, where = _source(config)
    if "delayed_parameter_initialization" in given:
        raise ValueError(f"smp.init: {where}: delayed_parameter_initialization is not supported "
                         "on heft's v1 API: build the model whole (a stage keeps its layers "
                         "only), or build it under heft.torch.parallel.deferred_init() for "
                         "heft.torch.parallel.Pipeline or tsm (the v2 API)")
    seed = given.pop("random_seed", None)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"smp.init: {where}: random_seed={seed!r}: expected an integer")
    try:
        text = _c10d.model_parallel_parameters(json.dumps(given), world)
    except ValueError as e:
        lines = str(e).replace("distribution.smdistributed.modelparallel.parameters.", "")
        lines = lines.replace("distribution.smdistributed.modelparallel.parameters", "parameters")
        raise ValueError(f"smp.init: {where}: " + "\n  ".join(lines.splitlines())) from None
    values = json.loads(text)
    for key, (default, why) in _REFUSED.items():
        if values.get(key, default) != default:
            raise ValueError(f"smp.init: {where}: {key}={values[key]!r} is not supported: {why}")
    return values, seed


def init(config=None):
    """Joins (or makes, from the environment) the default process group on backend heft,
    reads the library's parameters (a dict, or None: the JSON object in SM_HP_MP_PARAMETERS,
    as the job's distribution delivers it) by the job spec's rules, and lays the world out as
    heft's DeviceMesh(pipeline=partitions, placement=placement_strategy): the rest of the
    ranks are data-parallel replicas. Seeds torch with random_seed when given. Collective."""
    read(config)  # every key refused before any group is joined
    _hdist.join_heft_group("smp.init")
    values, seed = read(config, dist.get_world_size())
    if seed is not None:
        torch.manual_seed(seed)
    state.mesh = DeviceMesh(pipeline=values["partitions"],
                            placement=values["placement_strategy"])
    state.config, state.random_seed = values, seed


def rank():
    """This process's rank in the world."""
    return dist.get_rank() if state.need("rank").mesh else 0


def size():
    return dist.get_world_size() if state.need("size").mesh else 1


def local_rank():
    state.need("local_rank")
    return _hdist.get_local_rank()


def local_size():
    state.need("local_size")
    return _hdist.get_local_size()


def pp_rank():
    """This rank's pipeline stage (its partition), [0, pp_size())."""
    return state.need("pp_rank").mesh.coordinate("pipeline")


def pp_size():
    return state.need("pp_size").mesh.size("pipeline")


def tp_rank():
    state.need("tp_rank")
    return 0


def tp_size():
    state.need("tp_size")
    return 1


def mp_rank():
    """This rank among the ranks holding its model replica: its partition (no tensor
    parallelism on this API)."""
    return pp_rank()


def mp_size():
    return pp_size()


def dp_rank():
    """Which model replica this rank belongs to, [0, dp_size())."""
    return state.need("dp_rank").mesh.coordinate("data")


def dp_size():
    return state.need("dp_size").mesh.size("data")


rdp_rank, rdp_size = dp_rank, dp_size  # replicas without sharding: the data dimension


def get_mp_group():
    """The world ranks over which this rank's model replica is partitioned."""
    return list(state.need("get_mp_group").mesh.ranks("pipeline"))


def get_dp_group():
    """The world ranks holding replicas of this rank's partition."""
    return list(state.need("get_dp_group").mesh.ranks("data"))


def get_pp_group():
    return get_mp_group()


def get_mp_process_group():
    return state.need("get_mp_process_group").mesh.group("pipeline")


def get_dp_process_group():
    return state.need("get_dp_process_group").mesh.group("data")


def get_world_process_group():
    state.need("get_world_process_group")
    return dist.group.WORLD


def _group(group, what):
    s = state.need(what)
    if group in (CommGroup.WORLD, None):
        return None, list(range(dist.get_world_size()))
    if group == CommGroup.MP_GROUP:
        return s.mesh.group("pipeline"), list(s.mesh.ranks("pipeline"))
    if group == CommGroup.DP_GROUP:
        return s.mesh.group("data"), list(s.mesh.ranks("data"))
    raise ValueError(f"smp.{what}: group={group!r}: expected smp.CommGroup.WORLD, MP_GROUP or "
                     "DP_GROUP")


def _world_rank(peer, rank_type, what):
    s = state.need(what)
    names = {RankType.WORLD_RANK: None, RankType.MP_RANK: "pipeline", RankType.DP_RANK: "data"}
    if rank_type not in names:
        raise ValueError(f"smp.{what}: rank_type={rank_type!r}: expected smp.RankType.WORLD_RANK,"
                         " MP_RANK or DP_RANK")
    ranks = (list(range(dist.get_world_size())) if names[rank_type] is None
             else list(s.mesh.ranks(names[rank_type])))
    if not isinstance(peer, int) or not 0 <= peer < len(ranks):
        raise ValueError(f"smp.{what}: rank {peer!r} is not a {rank_type.name} (0 to "
                         f"{len(ranks) - 1})")
    return ranks[peer]


def barrier(group=CommGroup.WORLD):
    g, _ = _group(group, "barrier")
    dist.barrier(group=g)


def allgather(obj, group=CommGroup.WORLD):
    """Every member's obj (picklable), in the group's rank order."""
    g, ranks = _group(group, "allgather")
    out = [None] * len(ranks)
    dist.all_gather_object(out, obj, group=g)
    return out


def send(obj, dest_rank, rank_type):
    """Sends picklable obj to dest_rank (of rank_type); the peer calls smp.recv_from."""
    dist.send_object_list([obj], dst=_world_rank(dest_rank, rank_type, "send"))


def recv_from(src_rank, rank_type):
    box = [None]
    dist.recv_object_list(box, src=_world_rank(src_rank, rank_type, "recv_from"))
    return box[0]


def broadcast(obj, group):
    """Sends obj to every other member of group, each of which calls smp.recv_from with this
    rank."""
    _, ranks = _group(group, "broadcast")
    me = dist.get_rank()
    for r in ranks:
        if r != me:
            dist.send_object_list([obj], dst=r)
