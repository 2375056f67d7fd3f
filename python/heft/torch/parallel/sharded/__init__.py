"""heft.torch.parallel.ShardedDataParallel: ZeRO-3 / FSDP for any torch.nn.Module, over the
heft backend. See docs/sharded.md. The data path (gathers, reduce-scatters, the replicas'
average, the gradient norm) is heft's C++ engine, heft-train's too (_c10d.parallel.sharded);
this module does the module surgery and the autograd hooks around it.

One step: the wrapper's forward gathers the root unit and starts the first unit's gather;
each unit's forward pre-hook waits for its gather, starts the next unit's (prefetch) and
points the module's parameter attributes at views of the gathered buffer; its forward hook
frees the buffer (zero_stage=3) and hooks the unit's outputs, which gather it again just
before its backward. When a unit's backward has produced every gradient, its gradients go
out as one reduce-scatter (asynchronous, overlapping the rest of backward); an engine
callback at the end of backward waits for them, averages across replicas (hybrid) and
leaves the result in the shards' .grad, which any torch.optim optimizer then steps."""
import contextlib
import ctypes
import functools
import os

import torch
import torch.distributed as dist
from torch.utils.checkpoint import checkpoint as _torch_checkpoint

from heft.torch import BACKEND, _c10d
from heft.torch.profile import phase
from ..mesh import DeviceMesh
from .. import deferred, memory
from . import _preflight, _state, _units
from ._flat import FlatUnit, Group

_MIXED = {None: (torch.float32, torch.float32), "fp32": (torch.float32, torch.float32),
          "bf16": (torch.bfloat16, torch.float32), "bf16-reduce": (torch.bfloat16, torch.bfloat16)}
_COUNTERS = ("recomputed", "allgathers", "prefetched", "gather_overlapped_compute", "reduce_scatters",
             "reduce_scatters_before_backward_end", "replicate_allreduces", "max_gathered",
             "reductions_capped", "max_reductions_in_flight")
_OWN_COUNTERS = ("recomputed", "gather_overlapped_compute", "reduce_scatters_before_backward_end")


_REDUCTIONS_IN_FLIGHT = 2  # reduce-scatters started and not yet waited for, per rank


def _fixed_mmap_threshold():
    """glibc raises its mmap threshold (up to 32 MiB) after the first large free, after
    which freed unit buffers stay in its heap and the RSS keeps its high-water mark.
    HEFT_SDP_MMAP_THRESHOLD=BYTES fixes the threshold, so buffers at least that large are
    unmapped when freed: a lower peak RSS for page faults on every large allocation (off by
    default; docs/sharded.md has the figures)."""
    value = int(os.environ.get("HEFT_SDP_MMAP_THRESHOLD", 0))
    if value > 0:
        try:
            ctypes.CDLL("libc.so.6").mallopt(-3, value)  # M_MMAP_THRESHOLD
        except (OSError, AttributeError):
            pass


def _groups(sharded_degree):
    """(shard Group, replicate Group or None). Every rank creates every subgroup in the
    same order, as torch requires."""
    if not dist.is_available() or not dist.is_initialized():
        if sharded_degree not in (None, 1):
            raise ValueError(f"ShardedDataParallel: sharded_degree={sharded_degree}: no process "
                             "group is initialized (one process: only 1 or None)")
        return Group(None, 0, 1), None
    if str(dist.get_backend()).lower() != BACKEND:
        raise RuntimeError(f"ShardedDataParallel: the default process group uses backend "
                           f"{dist.get_backend()!r}; its collectives must be heft's: "
                           f"init_process_group({BACKEND!r}, ...)")
    world, rank = dist.get_world_size(), dist.get_rank()
    degree = world if sharded_degree is None else sharded_degree
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1 or world % degree:
        raise ValueError(f"ShardedDataParallel: sharded_degree={sharded_degree!r} must be a "
                         f"positive integer dividing the world size {world}")
    if degree == world:
        return _group(None, rank, world), None
    shard = replicate = None
    for g in range(world // degree):
        pg = dist.new_group(list(range(g * degree, (g + 1) * degree)))
        if rank // degree == g:
            shard = _group(pg, rank % degree, degree)
    for k in range(degree):
        pg = dist.new_group(list(range(k, world, degree)))
        if rank % degree == k:
            replicate = _group(pg, rank // degree, world // degree)
    return shard, replicate


def _group(pg, rank, size):
    """A Group with its heft C++ side; pg None: the default group."""
    if size == 1:
        return Group(None, 0, 1)
    return Group(pg, rank, size, _c10d.parallel.Group(pg if pg is not None else dist.group.WORLD))


def _mesh_groups(mesh, sharded_degree):
    """(shard Group, replicate Group or None) from a DeviceMesh's "sharded" and
    "replicate" groups: the data dimension of the mesh, whatever else it holds."""
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"ShardedDataParallel: mesh must be a heft.torch.parallel.DeviceMesh, "
                        f"found {type(mesh).__name__}")
    if sharded_degree is not None:
        raise ValueError("ShardedDataParallel: give sharded_degree or mesh, not both (the "
                         "mesh's sharded size is the degree)")
    shard = _group(mesh.group("sharded"), mesh.coordinate("sharded"), mesh.size("sharded"))
    size = mesh.size("replicate")
    replicate = (_group(mesh.group("replicate"), mesh.coordinate("replicate"), size)
                 if size > 1 else None)
    return shard, replicate


class ShardedDataParallel(torch.nn.Module):
    """Shards `module`'s parameters, gradients and optimizer state over the data-parallel
    ranks. Arguments (keyword only):

    sharded_degree  ranks that share one copy of the model (None: all; fewer: hybrid, the
                    shard gradients averaged across the world // degree replicas)
    mesh            a heft.torch.parallel.DeviceMesh instead of sharded_degree: shard over
                    its "sharded" groups, average across its "replicate" groups (the data
                    dimension; pipeline and tensor ranks hold other model parts)
    units           sub-modules that become units: None (automatic, by size), an int (the
                    automatic policy's minimum parameters per unit), a list of classes, or a
                    callable (name, module) -> bool. The rest forms the root unit.
    mixed_precision None/"fp32", "bf16" (compute in bf16, reduce in fp32, fp32 master
                    shards) or "bf16-reduce" (also reduce in bf16)
    activation_checkpointing  False, True (every unit) or a list of classes: recompute
                    those units' forward during backward
    zero_stage      3 (free full parameters after each forward, gather again for
                    backward) or 2 (keep them from forward to the unit's backward)
    memory_check    the optimizer the memory pre-flight assumes ("adamw" by default; the
                    names of training_state_bytes), or False: no pre-flight. Collective:
                    before any shard is allocated, every rank raises MemoryError when the
                    ranks of a machine would need more than it has available, naming the
                    components and the options that fit (docs/sharded.md); the prediction
                    is kept as .memory_plan (bytes per component, activations not counted)
    """

    def __init__(self, module, *, sharded_degree=None, units=None, mixed_precision=None,
                 activation_checkpointing=False, zero_stage=3, mesh=None, memory_check="adamw"):
        super().__init__()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"ShardedDataParallel: module must be a torch.nn.Module, found "
                            f"{type(module).__name__}")
        if isinstance(module, ShardedDataParallel) or getattr(module, "_heft_sharded", False):
            raise ValueError("ShardedDataParallel: module is already wrapped by "
                             "ShardedDataParallel (wrap a model once)")
        if mixed_precision not in _MIXED:
            raise ValueError(f"ShardedDataParallel: mixed_precision={mixed_precision!r}: "
                             f"expected one of {sorted(k for k in _MIXED if k)} or None")
        if zero_stage not in (2, 3):
            raise ValueError(f"ShardedDataParallel: zero_stage={zero_stage!r}: expected 2 or 3")
        self.compute_dtype, self.reduce_dtype = _MIXED[mixed_precision]
        _fixed_mmap_threshold()
        self.reshard_after_forward = zero_stage == 3
        self._counts = dict.fromkeys(_OWN_COUNTERS, 0)
        state_keys = list(module.state_dict().keys())
        specs = _units.assign(module, _units.select_units(module, units))
        specs = specs[:1] + [s for s in specs[1:] if s.params]  # tied away: nothing to shard
        ckpt = self._checkpoint_match(activation_checkpointing)
        self.shard_group, self.replicate_group = (
            _groups(sharded_degree) if mesh is None else _mesh_groups(mesh, sharded_degree))
        self.memory_plan = None
        if memory_check is not False:
            self.memory_plan = self._preflight(module, specs, memory_check, zero_stage, mesh)
        self.module = module
        self.engine = _c10d.parallel.sharded.Engine(
            self.shard_group.heft, self.replicate_group.heft if self.replicate_group else None,
            self.compute_dtype, self.reduce_dtype, _REDUCTIONS_IN_FLIGHT)
        record = deferred.find(module)
        if record is not None:  # built under deferred_init(): each rank replays its shard
            shards = deferred.materialize(record, module, specs, self.engine)
            self.materialize_peak_bytes = record.peak_bytes
        else:
            shards = [self._shard_from_rank0(spec) for spec in specs]
        self.units = []
        for i, (spec, shard) in enumerate(zip(specs, shards)):
            self.units.append(FlatUnit(i, spec, self, shard))
            for places in spec.slots:
                for s in places:
                    del s.module._parameters[s.attr]
        self._shards = torch.nn.ParameterList([u.shard for u in self.units])
        for u in self.units[1:]:
            u.module.register_forward_pre_hook(functools.partial(self._pre_forward, u))
            u.module.register_forward_hook(functools.partial(self._post_forward, u))
            if ckpt(u.module):
                u.module.forward = functools.partial(_checkpointed, self, u.module.forward)
        module._heft_sharded = True
        self._state_keys = state_keys
        self.order, self._order_fixed = [], False
        self._in_backward = False
        if self.compute_dtype != torch.float32:  # after the units' hooks: runs after theirs
            for m in module.modules():
                if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                    m.register_forward_pre_hook(_batch_norm_in_fp32)

    # ---- construction helpers -------------------------------------------------------
    def _preflight(self, module, specs, optimizer, zero_stage, mesh):
        """The memory pre-flight (_preflight.check), with the options it may name: bf16
        compute, shards over the whole world (hybrid), smaller automatic units."""
        if not isinstance(optimizer, str):
            raise ValueError(f"ShardedDataParallel: memory_check={optimizer!r}: expected an "
                             "optimizer name (\"adamw\", \"adam\", \"sgd-momentum\", \"sgd\", "
                             "...) or False")
        try:
            memory.optimizer_state_of(optimizer)
        except ValueError as e:
            raise ValueError(f"ShardedDataParallel: memory_check: {e}") from None

        def price(unit_specs=specs, degree=self.shard_group.size,
                  dtypes=(self.compute_dtype, self.reduce_dtype)):
            return _preflight.plan(unit_specs, degree, *dtypes, optimizer, zero_stage=zero_stage,
                                   reductions_in_flight=_REDUCTIONS_IN_FLIGHT)[0]

        options = []
        if self.compute_dtype == torch.float32:
            options.append(("mixed_precision='bf16'", lambda: price(dtypes=_MIXED["bf16"])))
        if self.replicate_group is not None and mesh is None:
            world = dist.get_world_size()
            options.append((f"sharded_degree={world}", lambda: price(degree=world)))
        largest = max((sum(p.numel() for p in s.params) for s in specs[1:]), default=0)
        for n in (largest // 4, largest // 16):
            if n >= 1:
                options.append((f"units={n}",
                                lambda n=n: price(unit_specs=_preflight.auto_units(module, n))))
        return _preflight.check(module, specs, self.shard_group.size, self.compute_dtype,
                                self.reduce_dtype, optimizer, zero_stage=zero_stage,
                                reductions_in_flight=_REDUCTIONS_IN_FLIGHT, options=options)

    @staticmethod
    def _checkpoint_match(spec):
        if spec is False or spec is None:
            return lambda m: False
        if spec is True:
            return lambda m: True
        classes = tuple(spec) if isinstance(spec, (list, tuple)) else None
        if not classes or not all(isinstance(c, type) for c in classes):
            raise TypeError(f"ShardedDataParallel: activation_checkpointing={spec!r}: expected "
                            "True, False or a list of module classes")
        return lambda m: isinstance(m, classes)

    def _shard_from_rank0(self, spec):
        """This rank's part of the unit's parameters back to back in fp32: the values of the
        first rank of this module's data group (sharded x replicate; world rank 0 without
        a mesh), broadcast over the shard group, then over the replicate group (the
        engine's). Only the ranks holding this module take part (a pipeline stage's chunk,
        a tensor slice)."""
        flat = torch._C._nn.flatten_dense_tensors([p.detach().float() for p in spec.params]) \
            if spec.params else torch.zeros(0)
        return self.engine.shard_of_first_rank(flat)

    @property
    def counters(self):
        """What the last passes did (tests check the paths ran): the engine's counts of
        collectives and this wrapper's of recomputations and overlap."""
        both = dict(self.engine.counters(), **self._counts)
        return {k: both[k] for k in _COUNTERS}

    # ---- forward ------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        self._finish_pass()
        if self.compute_dtype != torch.float32:
            args, kwargs = _cast_floats((args, kwargs), self.compute_dtype)
        root = self.units[0]
        root.start_gather()
        if self.order:
            self.order[0].start_gather(prefetch=True)
        root.use_views()
        out = self.module(*args, **kwargs)
        if not self._order_fixed:
            self._order_fixed = True
        self._after_forward(root, out)
        if not torch.is_grad_enabled():
            self._finish_pass()
        return out

    def _pre_forward(self, unit, module, inputs):
        if not self._order_fixed and unit not in self.order:
            self.order.append(unit)
        unit.use_views()
        if not self._in_backward and self._order_fixed:
            i = self.order.index(unit)
            if i + 1 < len(self.order):
                self.order[i + 1].start_gather(prefetch=True)

    def _post_forward(self, unit, module, inputs, output):
        if self._in_backward:
            return None  # a recompute under activation checkpointing
        if self.engine.gather_in_flight():
            self._counts["gather_overlapped_compute"] += 1
        self._after_forward(unit, output)
        return None

    def _after_forward(self, unit, output):
        if self.reshard_after_forward:
            unit.free()
        if torch.is_grad_enabled():
            for t in _tensors(output):
                if t.requires_grad:
                    t.register_hook(functools.partial(self._pre_backward, unit))

    # ---- backward -----------------------------------------------------------------------
    def _pre_backward(self, unit, grad):
        if not self._in_backward:
            self._in_backward = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)
        if not unit.backward_hooked:
            unit.backward_hooked = True
            unit.ensure_gathered()
            if unit in self.order:
                i = self.order.index(unit)
                if i > 0 and self.reshard_after_forward:
                    self.order[i - 1].start_gather(prefetch=True)
        return grad

    def reduce_started(self, unit, flat):
        """Called by a unit whose backward ended: start its reduce-scatter (the engine's,
        in the reduce dtype). The engine holds `flat` until the reduce-scatter completes;
        not kept here, so each unit's full gradient is freed as soon as its reduction is
        done. At most _REDUCTIONS_IN_FLIGHT are: when backward outruns the communicator
        (ranks sharing cores), waiting for the oldest keeps the full gradients alive at once
        to a few units' instead of, in the end, the whole model's."""
        if any(u.views is not None and not u.reduced for u in self.units if u is not unit):
            self._counts["reduce_scatters_before_backward_end"] += 1
        with phase("communication"):
            self.engine.reduce(unit.index, flat)

    def _end_backward(self):
        """The engine's callback once backward is over: shard gradients in place (added to
        what .grad holds: accumulation over backward passes)."""
        with phase("communication"):
            self.engine.finish_reductions()
        self._finish_pass()

    def _finish_pass(self):
        self._in_backward = False
        for u in self.units:
            u.free()
            u.end_pass()

    # ---- after backward -------------------------------------------------------------------
    @torch.no_grad()
    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scales the shards' gradients so that the global norm (over every rank's shard) is
        at most max_norm; returns the global norm before clipping (as torch's)."""
        return torch.tensor(self.engine.clip_grad_norm(float(max_norm), float(norm_type)))

    @contextlib.contextmanager
    def no_reshard(self):
        """Inside: no ZeRO-3 freeing between forward and backward (as zero_stage=2)."""
        previous, self.reshard_after_forward = self.reshard_after_forward, False
        try:
            yield self
        finally:
            self.reshard_after_forward = previous

    def full_state_dict(self):
        """The wrapped module's state_dict with full parameters (collective: every rank
        calls it; every rank gets it). fp32, on CPU."""
        return _state.full_state_dict(self)


def _checkpointed(sdp, forward, *args, **kwargs):
    inner = forward

    def forward(*a, **k):  # counts the recomputations (the tests check they ran)
        if sdp._in_backward:
            sdp._counts["recomputed"] += 1
        return inner(*a, **k)

    if kwargs:
        return _torch_checkpoint(functools.partial(forward, **kwargs), *args, use_reentrant=False)
    return _torch_checkpoint(forward, *args, use_reentrant=False)


def _batch_norm_in_fp32(module, inputs):
    """A BatchNorm under bf16 computes with fp32 weight and bias (views of the gathered
    ones, cast; the gradient flows back to them) beside its fp32 running statistics: torch
    1.13's CPU batch_norm refuses bf16 weights with fp32 statistics ("expected scalar type
    BFloat16 but found Float"), and the statistics stay fp32 (FSDP keeps BatchNorm in full
    precision likewise)."""
    for attr in ("weight", "bias"):
        t = module.__dict__.get(attr)
        if t is not None and t.dtype != torch.float32:
            module.__dict__[attr] = t.float()


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for x in obj:
            yield from _tensors(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _tensors(x)


def _cast_floats(obj, dtype):
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(_cast_floats(x, dtype) for x in obj)
    if isinstance(obj, dict):
        return {k: _cast_floats(v, dtype) for k, v in obj.items()}
    return obj
