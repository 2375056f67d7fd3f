"""One sharding unit at run time: its flat shard, its gathered (full) buffer and the views
the module computes with (heft.torch.parallel.ShardedDataParallel's module side).

The data path is heft's C++ engine (src/heft/parallel/sharded/flat_engine.h, bound as
heft.torch._c10d.parallel.sharded.Engine), the one heft-train's ShardedDataParallel runs:
it allocates and frees the full buffer, runs the all-gathers and reduce-scatters on heft's
communicator and averages across replicas. Python starts and awaits them, and hands it each
unit's gradient as one flat tensor."""
import torch

from heft.torch.profile import phase

_flatten = torch._C._nn.flatten_dense_tensors
_unflatten = torch._C._nn.unflatten_dense_tensors


class Group:
    """A process group and this rank's place in it; size 1 needs no collective. heft: the
    group as heft's C++ layers take it (a _c10d.parallel.Group; None for size 1)."""

    def __init__(self, pg, rank, size, heft=None):
        self.pg, self.rank, self.size, self.heft = pg, rank, size, heft


class _Views(torch.autograd.Function):
    """anchor -> the unit's parameters as views of its full buffer. Backward gets every
    parameter's gradient at once (the unit's backward has ended) and hands them to the
    unit as one flat tensor."""

    @staticmethod
    def forward(ctx, anchor, unit):
        ctx.unit = unit
        return tuple(_unflatten(unit.full, unit.likes))

    @staticmethod
    def backward(ctx, *grads):
        ctx.unit.backward_done(grads)
        return None, None


class FlatUnit:
    """spec: a _units.UnitSpec. owner: the ShardedDataParallel (its engine, counters,
    options). The unit is the engine's flat and unit of index `index`."""

    def __init__(self, index, spec, owner, shard_fp32):
        self.index, self.name, self.module, self.owner = index, spec.name, spec.module, owner
        self.slots = spec.slots
        engine = owner.engine
        n = sum(p.numel() for p in spec.params)
        self.numel = n
        self.shard_numel = engine.shard_numel_for(n)
        self.padded = self.shard_numel * engine.shard_size
        dtype = owner.compute_dtype
        self.likes = [torch.empty(p.shape, device="meta") for p in spec.params]
        self.likes.append(torch.empty(self.padded - n, device="meta"))
        self.grad_pad = torch.zeros(self.padded - n, dtype=dtype)
        trainable = {p.requires_grad for p in spec.params}
        if len(trainable) > 1:
            frozen = [places[0].name for p, places in zip(spec.params, spec.slots)
                      if not p.requires_grad]
            raise ValueError(f"ShardedDataParallel: units: unit {spec.name or '(root)'!r} mixes "
                             f"frozen parameters ({', '.join(frozen[:4])}) with trainable ones; "
                             "choose units that keep them apart")
        requires_grad = trainable != {False}
        self.shard = torch.nn.Parameter(shard_fp32, requires_grad=requires_grad)
        flat = engine.add_flat(self.shard, n)
        unit = engine.add_unit([flat])
        assert flat == index and unit == index, (flat, unit, index)
        self.full = engine.full(index)  # storage only while gathered (the engine's)
        self.anchor = torch.empty(0, requires_grad=requires_grad)
        self.views = None      # this pass's views (one autograd node per forward pass)
        self.backward_hooked = False
        self.reduced = False   # this pass's backward has ended

    # ---- gather / free ---------------------------------------------------------------
    @property
    def gathered(self):
        return self.owner.engine.gathered(self.index)

    def start_gather(self, prefetch=False):
        self.owner.engine.gather(self.index, prefetch)

    def ensure_gathered(self):
        engine = self.owner.engine
        engine.gather(self.index, False)
        with phase("communication"):
            engine.wait_gathered(self.index)

    def free(self):
        self.owner.engine.release(self.index)

    # ---- views -----------------------------------------------------------------------
    def use_views(self):
        """Gathered, and the module's parameter attributes are this pass's views."""
        self.ensure_gathered()
        if self.views is None:
            self.views = _Views.apply(self.anchor, self)
            for view, places in zip(self.views, self.slots):
                for s in places:
                    s.module.__dict__[s.attr] = view

    def end_pass(self):
        self.views = None
        self.backward_hooked = False
        self.reduced = False

    # ---- backward ----------------------------------------------------------------------
    def backward_done(self, grads):
        """Every gradient of this unit is in: one flat reduce-scatter (average over the
        shard group), started now; the full parameters are freed."""
        o = self.owner
        self.reduced = True
        flat = _flatten(list(grads[:-1]) + [self.grad_pad])
        self.free()
        o.reduce_started(self, flat)
