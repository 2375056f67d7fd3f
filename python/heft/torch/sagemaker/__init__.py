"""``heft.torch.sagemaker``: the cloud vendor's model-parallel library v2 (SMP v2,
``torch.sagemaker``) on heft's strategies. A script keeps its two lines and its FSDP2::

    import heft.torch.sagemaker as tsm            # was: import torch.sagemaker as tsm
    tsm.init(config)                              # a dict, a JSON file, or SM_HP_MP_PARAMETERS
    model = tsm.transform(model)                  # tensor parallel over tsm.state's tensor group
    for block in model.encoder.layers:
        fully_shard(block, mesh=tsm.state.dp_mesh)
    fully_shard(model, mesh=tsm.state.dp_mesh)

The layout is heft's DeviceMesh (tensor groups of consecutive ranks, data groups across them,
the data dimension split into shard groups of hybrid_shard_degree and replicas), the split is
heft.torch.parallel.tensor_parallel's, the collectives are backend heft's. Each configuration
key is honoured or refused by name with the reason (_config.KEYS; docs/tsm.md has the table).
Left out: context and expert parallelism, activation offloading (GPU-only), the library's
own transformer implementations (transform's config=) and its checkpoint functions."""
import torch
import torch.distributed as dist

import heft.torch.distributed as _hdist
from heft.torch.parallel import DeviceMesh, deferred, tensor_parallel
from torch.distributed.device_mesh import DeviceMesh as _TorchMesh

from . import _config, _transform
from ._state import State

state = State()


def is_initialized():
    """True after tsm.init()."""
    return state._values is not None


def _degrees(values, world):
    """(tp, dp, shard degree) for the world; ValueError naming the key that does not fit."""
    tp, hybrid = values["tensor_parallel_degree"], values["hybrid_shard_degree"]
    if world % tp:
        raise ValueError(f"tsm.init: tensor_parallel_degree={tp} does not divide the world of "
                         f"{world} ranks")
    dp = world // tp
    if hybrid > dp or (hybrid and dp % hybrid):
        raise ValueError(f"tsm.init: hybrid_shard_degree={hybrid} does not divide the "
                         f"data-parallel world of {dp} ranks (world {world} / "
                         f"tensor_parallel_degree {tp}); use a divisor of {dp}, or 0 for all")
    return tp, dp, hybrid or dp


def _replica_groups(mesh):
    """This rank's replica group (its shard group's ranks with their tensor groups): one
    new_group per replica, the same order on every rank; the default group without replicas."""
    tensor_of = {r: tuple(g) for g in mesh.groups("tensor") for r in g}
    replicas = []
    for shard in mesh.groups("sharded"):
        ranks = sorted({r for s in shard for r in tensor_of[s]})
        if ranks not in replicas:
            replicas.append(ranks)
    mine = None
    for ranks in replicas:
        group = dist.group.WORLD if len(ranks) == mesh.world else dist.new_group(ranks)
        if mesh.rank in ranks:
            mine = group
    return mine


def _data_mesh(mesh, dp, shard):
    """torch's DeviceMesh over heft's data group (no new communicators: from_group wraps the
    groups heft's DeviceMesh made): ('shard',), or ('replicate', 'shard') for FSDP2's hybrid
    sharding, whose rows are the replicas as heft lays them out (shard index fastest)."""
    if shard == dp:
        return _TorchMesh.from_group(mesh.group("data"), "cpu", mesh_dim_names=("shard",))
    ranks = torch.tensor(mesh.ranks("data")).view(dp // shard, shard)
    return _TorchMesh.from_group([mesh.group("replicate"), mesh.group("sharded")], "cpu",
                                 mesh=ranks, mesh_dim_names=("replicate", "shard"))


def init(config=None):
    """Reads the configuration (a dict, the path of a JSON file, or None: the JSON object in
    SM_HP_MP_PARAMETERS, empty when unset), refusing any key heft does not honour with a
    ValueError naming it and why, before anything else; joins (or makes, from the
    environment) the default process group on backend heft; checks the degrees against the
    world (ValueError naming the key and the world); seeds torch with random_seed on every
    rank; builds heft's DeviceMesh(tensor=tensor_parallel_degree,
    sharded=hybrid_shard_degree) and torch's data mesh for FSDP2, and fills tsm.state.
    Collective: every rank calls it with the same configuration. A later call replaces the
    state (new groups)."""
    values = _config.read(config)
    _hdist.join_heft_group("tsm.init")
    world, rank = dist.get_world_size(), dist.get_rank()
    tp, dp, shard = _degrees(values, world)
    if values["random_seed"] is not None:
        torch.manual_seed(values["random_seed"])
    mesh = DeviceMesh(tensor=tp, sharded=shard)
    replica = _replica_groups(mesh)
    dp_mesh = _data_mesh(mesh, dp, shard)
    state._fill({
        "rank": rank, "world_size": world, "local_rank": _hdist.get_local_rank(),
        "tensor_parallel_degree": tp, "tp_size": tp, "tp_rank": mesh.coordinate("tensor"),
        "tp_process_group": mesh.group("tensor"), "dp_size": dp,
        "dp_rank": mesh.coordinate("data"), "dp_process_group": mesh.group("data"),
        "hybrid_shard_degree": shard, "rep_rank_process_group": replica, "dp_mesh": dp_mesh,
        "mesh": mesh, "config": values})


def transform(model, device=None, dtype=None, config=None, load_state_dict_from_rank0=False,
              cp_comm_type="p2p", *, plan=None):
    """Splits `model` over tsm.state's tensor group, in place, and returns it: heft's
    tensor_parallel with `plan` (a tensor_parallel plan: module-name patterns to 'colwise',
    'rowwise', 'vocab' or 'heads'; None: default_plan's, every nn.MultiheadAttention by heads
    and every two-layer MLP colwise / rowwise). With tensor_parallel_degree 1 the model is
    left unchanged. activation_checkpointing (init's config) then wraps the repeated blocks
    (or the modules its patterns name) in torch.utils.checkpoint. Wrap the result with
    FSDP2's fully_shard over tsm.state.dp_mesh and make the optimizer afterwards.

    Checks first that every rank holds the same weights (ValueError naming the first that
    differs; set random_seed, or load_state_dict_from_rank0=True gives every rank rank 0's by
    broadcast). device: None or CPU (a GPU device is refused); dtype: None or float32 (build
    the model in the dtype you want); config (the library's transformer configuration for its
    own model implementations) is refused: heft splits your model's own layers; cp_comm_type
    applies to context parallelism only, which heft refuses at init. Collective."""
    if not is_initialized():
        raise RuntimeError("tsm.transform: call tsm.init() first")
    if device is not None and torch.device(device).type != "cpu":
        raise ValueError(f"tsm.transform: device={device!r} needs a GPU; heft runs on CPUs "
                         "(leave device unset)")
    if dtype not in (None, torch.float32):
        raise ValueError(f"tsm.transform: dtype={dtype!r}: heft splits the model as built; build "
                         "it in the dtype you want (or use FSDP2's MixedPrecisionPolicy) and "
                         "leave dtype unset")
    if config is not None:
        raise ValueError("tsm.transform: config= configures the library's own transformer "
                         "implementations for Hugging Face models, which heft does not have; "
                         "heft splits your model's layers by plan= (docs/tsm.md)")
    if cp_comm_type not in ("p2p", "all_gather"):
        raise ValueError(f"tsm.transform: cp_comm_type={cp_comm_type!r}: expected 'p2p' or "
                         "'all_gather' (it applies to context parallelism only, which heft "
                         "does not have)")
    delayed = state.config["delayed_parameter_initialization"]
    record = deferred.find(model)
    if delayed and record is None:
        raise ValueError("tsm.transform: delayed_parameter_initialization is true but the model "
                         "holds no parameter built under heft.torch.parallel.deferred_init(); "
                         "build it inside `with heft.torch.parallel.deferred_init():`")
    if record is not None and not delayed:
        raise ValueError("tsm.transform: the model was built under deferred_init (its "
                         "parameters are meta tensors); set delayed_parameter_initialization: "
                         "true in tsm.init's config")
    if delayed and load_state_dict_from_rank0:
        raise ValueError("tsm.transform: load_state_dict_from_rank0=True broadcasts rank 0's "
                         "full weights, which a model under delayed_parameter_initialization "
                         "never has; every rank replays the same seed instead (random_seed)")
    if load_state_dict_from_rank0:
        _transform.from_rank0(model)
    if not delayed:
        _transform.same_weights(model, None)
    elif state.tp_size == 1:  # nothing to split: each rank replays the model whole for FSDP2
        deferred.materialize_held(record, model, lambda p, full: full.clone())
    if state.tp_size > 1:
        chosen = plan if plan is not None else _transform.default_plan(model)
        if not chosen:
            raise ValueError("tsm.transform: the default plan found nothing to split (no "
                             "nn.MultiheadAttention, no Sequential of two nn.Linear with "
                             "element-wise layers between); pass plan= (docs/parallel.md, "
                             "\"The plan\")")
        tensor_parallel(model, chosen, state.mesh)
    checkpointing = state.config["activation_checkpointing"]
    if checkpointing:
        _transform.checkpoint_blocks(model, checkpointing)
    return model


default_plan = _transform.default_plan

__all__ = ["default_plan", "init", "is_initialized", "state", "transform"]
