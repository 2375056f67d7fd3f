"""heft.torch.parallel.auto_layout: the layout (data, sharded, tensor and pipeline degrees,
micro-batches, virtual stages, checkpointing) heft's C++ search (layout_search.h) predicts
fastest for a model on `world` ranks within `memory_limit` bytes per rank. The layers are
profiled by the partitioner's profiler (_pipeline_plan._profile); the communicator's costs are
(collective, group, alpha_s, beta_bytes_per_s) rows: given, else measured on the heft group
(`group`, else the default group when torch.distributed runs on heft with several ranks:
comm_measure.h through _c10d.parallel.layout.measure), else DEFAULT_COMM (a guess, one
process has nothing to measure). With a group every rank takes rank 0's profile, so every
rank gets the same plan. docs/auto-layout.md."""
from dataclasses import dataclass, field

from . import _c10d
from ._pipeline_plan import _profile, layers_of

# A loopback guess: 50 us latency, 2 GB/s, for groups of 2 to 1024.
DEFAULT_COMM = [(c, g, 50e-6, 2e9) for c in ("allreduce", "reduce_scatter", "all_gather", "p2p")
                for g in (2, 1024)]
OPTIMIZER_STATE = {"adamw": 2.0, "adam": 2.0, "sgd": 0.0, "sgd-momentum": 1.0}


@dataclass
class LayoutPlan:
    """The chosen layout: DeviceMesh(data=data*sharded..., tensor=tensor, pipeline=pipeline),
    Pipeline(microbatches=, virtual_stages=, partition=stage_first[1:]), ShardedDataParallel
    when sharded > 1; `ranked`/`dropped` hold every candidate (dicts from the C++ search)."""
    data: int
    sharded: int
    tensor: int
    pipeline: int
    microbatches: int
    virtual_stages: int
    checkpointing: bool
    step_s: float
    memory_bytes: int
    stage_first: list
    ranked: list = field(repr=False)
    dropped: list = field(repr=False)
    describe: str = field(repr=False)
    comm_measured: bool = False  # the comm rows were measured on a group (else given/default)


def _heft_group(group):
    """The heft group to measure on and share the profile over: `group`, else the default
    group when torch.distributed is initialized on heft with several ranks; else None."""
    import torch.distributed as dist
    if group is not None:
        return group
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    if dist.get_backend() != "heft":
        return None
    return dist.distributed_c10d._get_default_group()


def measured_comm(group=None):
    """(collective, group, alpha_s, beta_bytes_per_s) rows measured on the heft `group`'s
    communicator (default: the default group); a collective: every rank of the group calls it
    and gets rank 0's fit."""
    group = _heft_group(group)
    if group is None:
        raise ValueError("auto_layout: measured_comm needs torch.distributed initialized on the "
                         "heft backend with several ranks, or a heft group")
    return [tuple(r) for r in _c10d.parallel.layout.measure(_c10d.parallel.Group(group))]


def auto_layout(layers_or_sequential, example_batch, world, memory_limit, *, global_batch=None,
                optimizer="adamw", comm=None, heads=0, saved_activation_factor=4.0,
                tensor_allreduces_per_layer=2, microbatches=(1, 2, 4, 8, 16, 32),
                virtual_stages=(1, 2), checkpointing=(False, True), overlap_gradients=False,
                group=None):
    """Profiles the layers on `example_batch` (its first dimension is the profiled batch) and
    returns the fastest feasible LayoutPlan; ValueError naming the smallest memory any layout
    needs when none fits `memory_limit` (bytes per rank). global_batch: samples per step over
    all ranks (default: example_batch's batch x world). comm: rows to use; None: measured on
    `group` (or the default heft group, see _heft_group; a collective then), else DEFAULT_COMM."""
    layers = layers_of(layers_or_sequential)
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"auto_layout: optimizer={optimizer!r}: expected one of "
                         f"{sorted(OPTIMIZER_STATE)}")
    for name, value in (("world", world), ("memory_limit", memory_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"auto_layout: {name}={value!r}: expected a positive integer")
    profiled = int(example_batch.shape[0]) if example_batch.dim() > 0 else 1
    rows = _profile(layers, example_batch)
    heft_group = _heft_group(group)
    measured = comm is None and heft_group is not None
    if heft_group is not None:  # every rank prices rank 0's profile: the same plan everywhere
        import torch.distributed as dist
        shared = [rows]
        c10d = dist.distributed_c10d
        first = 0 if heft_group is c10d._get_default_group() else c10d._get_global_rank(heft_group, 0)
        dist.broadcast_object_list(shared, src=first, group=heft_group)
        rows = shared[0]
    if measured:
        comm = measured_comm(heft_group)
    options = dict(world=world, memory_limit=memory_limit,
                   global_batch=global_batch if global_batch is not None else profiled * world,
                   profiled_batch=profiled,
                   optimizer_bytes_per_param_byte=OPTIMIZER_STATE[optimizer],
                   saved_activation_factor=float(saved_activation_factor),
                   tensor_allreduces_per_layer=tensor_allreduces_per_layer, heads=heads,
                   microbatches=list(microbatches), virtual_stages=list(virtual_stages),
                   checkpointing=list(checkpointing), overlap_gradients=bool(overlap_gradients))
    result = _c10d.parallel.layout.search(rows, list(comm or DEFAULT_COMM), options)
    best = result["ranked"][0]
    l = best["layout"]
    return LayoutPlan(data=l["data"], sharded=l["sharded"], tensor=l["tensor"],
                      pipeline=l["pipeline"], microbatches=l["microbatches"],
                      virtual_stages=l["virtual_stages"], checkpointing=l["checkpointing"],
                      step_s=best["step_s"], memory_bytes=best["memory_bytes"],
                      stage_first=best["stage_first"], ranked=result["ranked"],
                      dropped=result["dropped"], describe=result["describe"],
                      comm_measured=measured)
