"""heft.torch.parallel.auto_layout: the layout (data, sharded, tensor and pipeline degrees,
micro-batches, virtual stages, checkpointing) heft's C++ search (layout_search.h) predicts
fastest for a model on `world` ranks within `memory_limit` bytes per rank. The model's terms
are heft-train's (train/auto_layout.cc layout_inputs), measured by heft-train's own C++
measurement (parallel/layout/model_measure.h, over the layers as callables) and passed as they
are: each layer's time at the example batch and at twice it (a per-call part and a part per
sample), the heap each layer's forward keeps, the optimizer's step, the loss's or output
gradient's transient bytes, the runtime's resident bytes and the host's cores, threads and
other load (contention). The communicator's costs are
(collective, group, alpha_s, beta_bytes_per_s) rows: given, else measured on the heft group
(`group`, else the default group when torch.distributed runs on heft with several ranks:
comm_measure.h through _c10d.parallel.layout.measure), else DEFAULT_COMM (a guess, one
process has nothing to measure). With a group every rank takes rank 0's profile, so every
rank gets the same plan. docs/auto-layout.md."""
import os
import time
from dataclasses import dataclass, field

import torch

from heft.torch import _c10d
from ..pipeline import traced_layers
from ..pipeline._plan import PROFILE_REPEATS, PROFILE_WARMUP, layers_of
from ..tensor._plan import plan_layers
from ._estimate import MemoryEstimate, PART_MEANING, _layout_dict  # noqa: F401

_layout = _c10d.parallel.layout

# A loopback guess: 50 us latency, 2 GB/s, for groups of 2 to 1024.
DEFAULT_COMM = [(c, g, 50e-6, 2e9) for c in ("allreduce", "reduce_scatter", "all_gather", "p2p")
                for g in (2, 1024)]
OPTIMIZERS = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-6),
              "adam": lambda p: torch.optim.Adam(p, lr=1e-6),
              "sgd": lambda p: torch.optim.SGD(p, lr=1e-6),
              "sgd-momentum": lambda p: torch.optim.SGD(p, lr=1e-6, momentum=0.9)}
# The memory model's figures for them, heft-train's (the C++ table,
# parallel/layout/optimizer_memory.h): state elements per parameter element, and the
# temporaries of a step as copies of the largest parameter tensor (ModelCost's
# step_tensor_copies).
_MEMORY = _layout.optimizer_memory()
OPTIMIZER_STATE = {name: _MEMORY[name][0] for name in OPTIMIZERS}
STEP_TENSOR_COPIES = {name: _MEMORY[name][2] for name in OPTIMIZERS}


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
    # The model and host terms the search priced (ModelCost / SearchOptions names): saved_bytes,
    # forward_fixed_s, backward_fixed_s, optimizer_s, transient_bytes, fixed_bytes, host_*.
    inputs: dict = field(default_factory=dict, repr=False)
    comm: list = field(default_factory=list, repr=False)  # the (collective, group, alpha_s, beta) rows priced


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
    return dist.group.WORLD


def measured_comm(group=None):
    """(collective, group, alpha_s, beta_bytes_per_s) rows measured on the heft `group`'s
    communicator (default: the default group); a collective: every rank of the group calls it
    and gets rank 0's fit."""
    group = _heft_group(group)
    if group is None:
        raise ValueError("auto_layout: measured_comm needs torch.distributed initialized on the "
                         "heft backend with several ranks, or a heft group")
    return [tuple(r) for r in _c10d.parallel.layout.measure(_c10d.parallel.Group(group))]


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def measure_model(layers, example_batch, global_batch, optimizer="adamw", loss_fn=None,
                  step_probe=False):
    """(rows, terms): the layers' (name, forward_s, backward_s, param_bytes, output_bytes) rows
    and the model's measured terms for the search (ModelCost's names: saved_bytes,
    forward_fixed_s, backward_fixed_s, optimizer_s, transient_bytes, fixed_bytes,
    largest_tensor_bytes, backward_tensor_copies, step_tensor_copies, profile_peak_bytes,
    profile_residue_bytes; and step_probe_shapes, the optimizer probe's tensor shapes, which
    the host probe reuses), on this process. The measurement is heft-train's, in C++
    (parallel/layout/model_measure.h through _c10d.parallel.layout.measure_layers): each layer
    timed at the example batch and again at twice it (a per-call part and a part per sample),
    the heap each layer's forward keeps, the loss's seconds and transient bytes (loss_fn's on
    the last layer's output; without one the output's gradient), the optimizer's step on a probe
    shaped as the largest layer's parameters (within 8 MiB, scaled to the model's bytes). The runtime's bytes are this process's resident
    set before profiling less the model's parameters and buffers (the layout places those);
    the profile's peak is the process's (ru_maxrss) and its residue the resident bytes
    profiling added. transient_retention, run_bytes and replica_group_bytes stay 0:
    heft-train's are fitted to its own runs (its allocator settings, its kernels), not
    measured. step_probe: three whole training steps of the chain after the layers (the
    optimizer's step included, the parameters put back), their peak resident bytes over the
    resident set before them (step_peak_bytes: what the allocator keeps beyond what the model
    counts; estimate_memory's). The caller puts torch's generator back
    (auto_layout's _Untouched); the layers' gradients are left None."""
    model_bytes = sum(_nbytes(l.parameters()) + _nbytes(l.buffers()) for l in layers)
    before = _layout.resident_bytes()
    fixed = max(0, before - model_bytes)
    batched = example_batch.dim() > 0
    profiled = int(example_batch.shape[0]) if batched else 1
    larger = min(2 * profiled, max(profiled, global_batch)) if batched else 1
    big = None
    if larger > profiled:
        big = torch.cat([example_batch] * -(-larger // profiled))[:larger]
    m = _layout.measure_layers(
        forward=lambda i, x: layers[i](x),
        parameters=lambda i: list(layers[i].parameters()),
        layers=len(layers), names=[f"{i}:{type(l).__name__}" for i, l in enumerate(layers)],
        batch=example_batch.detach(), batch_samples=profiled, larger=big, larger_samples=larger,
        loss=loss_fn, input_requires_grad=example_batch.requires_grad,
        make_step=lambda params: OPTIMIZERS[optimizer](params).step,
        warmup=PROFILE_WARMUP, repeats=PROFILE_REPEATS, step_probe=step_probe)
    for l in layers:
        for p in l.parameters():
            p.grad = None
    terms = dict(saved_bytes=m["saved_bytes"], forward_fixed_s=m["forward_fixed_s"],
                 backward_fixed_s=m["backward_fixed_s"], optimizer_s=m["optimizer_s"],
                 transient_bytes=m["transient_bytes"], fixed_bytes=fixed,
                 largest_tensor_bytes=m["largest_tensor_bytes"],
                 backward_tensor_copies=1.0, step_tensor_copies=STEP_TENSOR_COPIES[optimizer],
                 # the process's peak so far and what profiling left resident
                 profile_peak_bytes=_layout.peak_resident_bytes(),
                 profile_residue_bytes=max(0, _layout.resident_bytes() - before),
                 step_probe_shapes=[list(s) for s in m["step_probe_shapes"]])
    if step_probe:
        terms["step_peak_bytes"] = m["step_peak_bytes"]
    return [tuple(r) for r in m["rows"]], terms


class _Untouched:
    """Puts back torch's generator and every layer's buffers (BatchNorm's running statistics)
    when the probes that run the user's layers are done."""

    def __init__(self, layers):
        self.layers = layers

    def __enter__(self):
        self.rng = torch.get_rng_state()
        self.buffers = [(b, b.detach().clone()) for l in self.layers for b in l.buffers()]

    def __exit__(self, *exc):
        torch.set_rng_state(self.rng)
        with torch.no_grad():
            for b, saved in self.buffers:
                b.copy_(saved)


def _input_of(layers, example_batch, i):
    """What layers[i] reads: the example batch through layers[:i], without autograd."""
    x = example_batch.detach()
    with torch.no_grad():
        for layer in layers[:i]:
            x = layer(x.clone())
    return x


def measured_host_terms(layers, example_batch, rows, optimizer, comm, group, step_probe_shapes=()):
    """SearchOptions' host_compute_inflation, host_step_inflation and host_sync, measured on
    every rank of the heft `group` at once (a collective; rank 0's figures on every rank) by
    host_probe.h, as heft-train's: the heaviest layer's forward and backward (CPU per call with
    every rank busy over rank 0 alone), the optimizer's step on tensors of the probe's shapes
    measure_model timed (its step_probe_shapes), and the forward of the layer of median forward
    time between one-float all-reduces per group size. The
    model's parameters, gradients, buffers and torch's generator are left as they were."""
    heavy = max(range(len(layers)), key=lambda i: rows[i][1] + rows[i][2])
    # Between synchronisation points: a layer of the median forward (the probe stays short).
    gap = sorted(range(len(layers)), key=lambda i: rows[i][1])[len(layers) // 2]
    pg = _c10d.parallel.Group(group)
    with _Untouched(layers):
        layer, x = layers[heavy], _input_of(layers, example_batch, heavy)
        params = [p for p in layer.parameters() if p.requires_grad]
        x_gap = _input_of(layers, example_batch, gap)

        def block():
            leaf = x.detach().requires_grad_(x.is_floating_point())
            with torch.enable_grad():
                y = layer(leaf.clone())
                wrt = params or ([leaf] if leaf.requires_grad else [])
                if wrt and y.requires_grad:  # gradients returned, not accumulated in .grad
                    torch.autograd.grad(y.float().sum(), wrt, allow_unused=True)

        def forward():
            with torch.no_grad():
                layers[gap](x_gap.clone())

        compute = _layout.inflation(pg, block, rounds=6)
        sync = _layout.sync_delay(pg, forward, list(comm))
    step_x = 1.0
    if step_probe_shapes and any(_nbytes(l.parameters()) for l in layers):
        # the probe measure_model timed the step on (model_measure.h step_probe_shapes: the
        # largest layer's shapes within 8 MiB), as heft-train's host probe
        copies = [torch.nn.Parameter(torch.full(shape, 0.5)) for shape in step_probe_shapes]
        for p in copies:
            p.grad = torch.zeros_like(p)
        step = OPTIMIZERS[optimizer](copies)
        step_x = _layout.inflation(pg, step.step, warmup=2, rounds=3)
    return dict(host_compute_inflation=compute, host_step_inflation=step_x, host_sync=sync,
                overlap_needs_idle_cores=True,
                # torch's DDP buckets (bucket_cap_mb 25, the first 1 MiB)
                bucket_bytes=25 << 20, first_bucket_bytes=1 << 20)


def host_terms(world, ranks_per_host=None):
    """The host's contention terms (SearchOptions'): its cores, the ranks on it x their threads
    (ranks_per_host, else LOCAL_WORLD_SIZE, else all `world` ranks) and its other processes'
    runnable threads weighted by their nice (host/host.h runnable_elsewhere, sampled over
    0.2 s: call it while the other ranks wait)."""
    local = ranks_per_host or int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return dict(host_cores=float(_layout.online_cpus()),
                host_threads=float(min(local, world) * torch.get_num_threads()),
                host_load=_layout.runnable_elsewhere())


def tensor_splits(model, world, heads, tensor_plan):
    """SearchOptions.tensor_splits: the largest tensor degree dividing `world` that
    `tensor_plan` (tensor_parallel's plan) can split `model` into (its splits are by
    divisibility, so every divisor of it can too); 0 (any degree, `heads` still divides it)
    when there is no plan but `heads` says the model splits; 1 when nothing says it splits.
    A plan that names no module of the model is a ValueError naming its pattern."""
    if tensor_plan is None:
        return 0 if heads > 0 else 1
    plan_layers(model, tensor_plan, 1)  # a pattern that names nothing: the plan's own error
    best = 1
    for t in range(2, world + 1):
        if world % t == 0:
            try:
                plan_layers(model, tensor_plan, t)
                best = t
            except ValueError:
                pass
    return best


def auto_layout(layers_or_sequential, example_batch, world, memory_limit, *, global_batch=None,
                optimizer="adamw", comm=None, heads=0, saved_activation_factor=4.0,
                tensor_allreduces_per_layer=2, microbatches=(1, 2, 4, 8, 16, 32),
                virtual_stages=(1, 2), checkpointing=(False, True), overlap_gradients=True,
                group=None, loss_fn=None, ranks_per_host=None, tensor_plan=None):
    """Measures the model (measure_model, host_terms) on `example_batch` (its first dimension
    is the profiled batch) and returns the fastest feasible LayoutPlan; ValueError naming the
    smallest memory any layout needs when none fits `memory_limit` (bytes per rank).
    global_batch: samples per step over all ranks (default: example_batch's batch x world).
    comm: rows to use; None: measured on `group` (or the default heft group, see _heft_group; a
    collective then), else DEFAULT_COMM. loss_fn: the last layer's output -> the loss (priced
    on the last stage; None: the output's gradient only). overlap_gradients: DDP's buckets
    reduce during the backward (torch's DDP, heft's DistributedDataParallel, do).
    tensor_plan: the plan tensor_parallel would apply (module-name patterns -> 'colwise',
    'rowwise', 'vocab', 'heads'); the tensor degree is then one the plan can split the model
    into. Without one the tensor degree is 1 (a conv net cannot be split by tensor_parallel),
    unless `heads` > 0 says the model splits by heads."""
    layers = layers_of(layers_or_sequential)
    whole = layers_or_sequential if isinstance(layers_or_sequential, torch.nn.Module) \
        else torch.nn.Sequential(*layers)
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"auto_layout: optimizer={optimizer!r}: expected one of "
                         f"{sorted(OPTIMIZER_STATE)}")
    for name, value in (("world", world), ("memory_limit", memory_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"auto_layout: {name}={value!r}: expected a positive integer")
    if loss_fn is not None and not callable(loss_fn):
        raise ValueError(f"auto_layout: loss_fn={loss_fn!r}: expected a callable (output -> loss)")
    splits = tensor_splits(whole, world, heads, tensor_plan)
    profiled = int(example_batch.shape[0]) if example_batch.dim() > 0 else 1
    global_batch = global_batch if global_batch is not None else profiled * world
    heft_group = _heft_group(group)
    measured = comm is None and heft_group is not None
    if measured:  # first: its buffers are then part of the runtime's resident bytes
        comm = measured_comm(heft_group)
    first, source = 0, True
    if heft_group is not None:
        import torch.distributed as dist
        first = 0 if heft_group is dist.group.WORLD else dist.get_global_rank(heft_group, 0)
        source = dist.get_rank() == first
    shared = [None]
    if source:  # the others wait (asleep) while the source rank samples the load and profiles
        host = host_terms(world, ranks_per_host)
        with _Untouched(layers):  # the profile runs the layers in training mode
            rows, terms = measure_model(layers, example_batch, global_batch, optimizer, loss_fn)
        shared = [(rows, dict(terms, **host))]
    if heft_group is not None:  # every rank prices rank 0's profile: the same plan everywhere
        dist.broadcast_object_list(shared, src=first, group=heft_group)
    rows, terms = shared[0]
    probed = {}
    if heft_group is not None:  # every rank: the host's share a one-rank profile cannot see
        t0 = time.monotonic()
        probed = measured_host_terms(layers, example_batch, rows, optimizer, comm, heft_group,
                                     terms.get("step_probe_shapes", ()))
        probed["host_probe_s"] = time.monotonic() - t0
    terms = dict(terms, **probed)
    options = dict(terms, world=world, memory_limit=memory_limit, global_batch=global_batch,
                   profiled_batch=profiled,
                   optimizer_bytes_per_param_byte=OPTIMIZER_STATE[optimizer],
                   saved_activation_factor=float(saved_activation_factor),
                   tensor_allreduces_per_layer=tensor_allreduces_per_layer, heads=heads,
                   microbatches=list(microbatches), virtual_stages=list(virtual_stages),
                   checkpointing=list(checkpointing), overlap_gradients=bool(overlap_gradients),
                   tensor_splits=splits,
                   # torch's DDP: its buckets are a flat copy of the gradients
                   # (gradient_as_bucket_view=False; heft-train's C++ DDP has views, 0);
                   # ShardedDataParallel: the full gradients before their reduce-scatters
                   replica_gradient_copies=1.0, sharded_gradient_copies=1.0)
    comm = list(comm or DEFAULT_COMM)
    result = _layout.search(rows, comm, options)
    best = result["ranked"][0]
    l = best["layout"]
    return LayoutPlan(data=l["data"], sharded=l["sharded"], tensor=l["tensor"],
                      pipeline=l["pipeline"], microbatches=l["microbatches"],
                      virtual_stages=l["virtual_stages"], checkpointing=l["checkpointing"],
                      step_s=best["step_s"], memory_bytes=best["memory_bytes"],
                      stage_first=best["stage_first"], ranked=result["ranked"],
                      dropped=result["dropped"], describe=result["describe"],
                      comm_measured=measured, inputs=terms, comm=comm)


def estimate_memory(model, example_batch, layout="ddp", *, world=1, optimizer="adamw",
                    loss_fn=None, comm=None, heads=0, tensor_plan=None,
                    saved_activation_factor=4.0, tensor_allreduces_per_layer=2):
    """A rank's peak memory for training `model` in `layout`, by component (MemoryEstimate).

    model: an nn.Sequential, a list of layers, or any module torch.fx can trace into layers
    (each taking the previous one's tensor: Pipeline's view of it); it must be materialised
    (the measurement runs it; a deferred_init model: training_state_bytes/require_memory).
    example_batch: one rank's batch of one step (its first dimension is the samples); the
    global batch is that times data x sharded. layout: "ddp" or "sharded" over `world` ranks,
    a dict of degrees (data, sharded, tensor, pipeline, microbatches, virtual_stages,
    checkpointing), or auto_layout's LayoutPlan. optimizer: "adamw", "adam", "sgd" or
    "sgd-momentum". loss_fn: the last layer's output -> the loss (else its gradient only).
    Runs the model's forward and backward a few times on this process (training mode; the
    model's parameters, buffers and torch's generator are left as they were; gradients None)."""
    lay = _layout_dict(layout, world)
    world = lay["data"] * lay["sharded"] * lay["tensor"] * lay["pipeline"]
    if optimizer not in OPTIMIZER_STATE:
        raise ValueError(f"estimate_memory: optimizer={optimizer!r}: expected one of "
                         f"{sorted(OPTIMIZER_STATE)}")
    if not isinstance(example_batch, torch.Tensor):
        raise ValueError("estimate_memory: example_batch: expected a tensor (one rank's batch), "
                         f"found {type(example_batch).__name__}")
    modules = model if isinstance(model, (list, tuple)) else [model]
    if any(p.is_meta for m in modules if isinstance(m, torch.nn.Module) for p in m.parameters()):
        raise ValueError("estimate_memory: the model is on the meta device (deferred_init): "
                         "the measurement runs it; use training_state_bytes / require_memory "
                         "for its state, or estimate a materialised smaller copy")
    if isinstance(model, (torch.nn.Sequential, list, tuple)):
        layers = layers_of(model)
    else:
        layers = [layer for layer, _ in traced_layers(model, "estimate_memory")]
    whole = torch.nn.Sequential(*layers)
    profiled = int(example_batch.shape[0]) if example_batch.dim() > 0 else 1
    global_batch = profiled * lay["data"] * lay["sharded"]
    with _Untouched(layers):
        rows, terms = measure_model(layers, example_batch, global_batch, optimizer, loss_fn,
                                    step_probe=True)
    terms.pop("step_probe_shapes", None)
    # The measured steps' peak prices what the allocator keeps (allocator_slack); what the
    # measurement itself left resident is such kept memory, which training reuses: not
    # counted again.
    terms["profile_residue_bytes"] = 0
    options = dict(terms, world=world, memory_limit=1 << 62, global_batch=global_batch,
                   profiled_batch=profiled, optimizer_bytes_per_param_byte=OPTIMIZER_STATE[optimizer],
                   saved_activation_factor=float(saved_activation_factor),
                   tensor_allreduces_per_layer=tensor_allreduces_per_layer, heads=heads,
                   microbatches=[lay["microbatches"]], virtual_stages=[lay["virtual_stages"]],
                   checkpointing=[bool(lay["checkpointing"])], overlap_gradients=True,
                   tensor_splits=tensor_splits(whole, world, heads, tensor_plan),
                   # as auto_layout prices them: torch's DDP buckets are a flat copy of the
                   # gradients; ShardedDataParallel holds the full gradients before their
                   # reduce-scatters
                   replica_gradient_copies=1.0, sharded_gradient_copies=1.0)
    comm = list(comm or DEFAULT_COMM)
    p = _layout.evaluate(rows, comm, options, lay)
    return MemoryEstimate(layout=p["layout"], total_bytes=int(p["memory_bytes"]),
                          parts={n: int(b) for n, b in p["memory_parts"]}, optimizer=optimizer,
                          rows=rows, options=options, comm=comm)
