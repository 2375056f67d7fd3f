"""One sharding unit at run time: its flat shard, its gathered (full) buffer and the views
the module computes with (heft.torch.parallel.ShardedDataParallel's module side).

The data path is heft's C++ engine (src/heft/parallel/sharded/flat_engine.h, bound as
heft.torch._c10d.parallel.sharded.Engine), the one heft-train's ShardedDataParallel runs:
it allocates and frees the full buffer, runs the all-gathers and reduce-scatters on heft's
communicator and averages across replicas. Python starts and awaits them, and hands it each
unit's gradient as one flat tensor."""
import functools

import torch

from heft.torch.profile import phase

_unflatten = torch._C._nn.unflatten_dense_tensors


class Group:
    """A process group and this rank's place in it; size 1 needs no collective. heft: the
    group as heft's C++ layers take it (a _c10d.parallel.Group; None for size 1)."""

    def __init__(self, pg, rank, size, heft=None):
        self.pg, self.rank, self.size, self.heft = pg, rank, size, heft


class _Views(torch.autograd.Function):
    """anchor -> the unit's parameters as views of its full buffer. Its backward runs once
    every slot's gradient is in (_Slot put them in the unit's flat gradient already; any
    other use of a view arrives here) and hands the unit's flat gradient on."""

    @staticmethod
    def forward(ctx, anchor, unit):
        ctx.unit = unit
        ctx.set_materialize_grads(False)  # an unused parameter: no zeros of its size
        return tuple(_unflatten(unit.full, unit.likes))

    @staticmethod
    def backward(ctx, *grads):
        for i, g in enumerate(grads[:-1]):
            if g is not None:
                ctx.unit.accumulate(i, g)
        ctx.unit.backward_done()
        return None, None


class _Slot(torch.autograd.Function):
    """One place a parameter is registered (a tied weight has several): the module computes
    with this view, and its backward adds the gradient into the unit's flat gradient at
    once, as soon as that module's backward produced it. So a tied embedding's two
    gradients (the head's, then the embedding's) are never alive together with their sum,
    and no unit's gradients are copied into a flat buffer after its backward: the peak a
    large unit adds in backward is its gathered parameters, its flat gradient and the one
    gradient being added (docs/sharded.md, "Memory pre-flight")."""

    @staticmethod
    def forward(ctx, view, unit, index):
        ctx.unit, ctx.index = unit, index
        return view.view_as(view)

    @staticmethod
    def backward(ctx, grad):
        ctx.unit.accumulate(ctx.index, grad)
        return None, None, None


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
        self.offsets, offset = [], 0
        for p in spec.params:
            self.offsets.append(offset)
            offset += p.numel()
        self.grad_flat = None  # this pass's gradient, padded, compute dtype (accumulate)
        by_module = {}
        for i, places in enumerate(spec.slots):
            for s in places:
                by_module.setdefault(id(s.module), (s.module, []))[1].append((s.attr, i))
        for module, entries in by_module.values():
            module.register_forward_pre_hook(functools.partial(self._fresh_slots, entries))
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
            for i, (view, places) in enumerate(zip(self.views, self.slots)):
                for s in places:
                    s.module.__dict__[s.attr] = _Slot.apply(view, self, i)

    def _fresh_slots(self, entries, module, inputs):
        """Before a module that holds this unit's parameters runs: a new _Slot for each, so
        its backward node comes right before the module's in autograd's order and runs as
        soon as the module's backward has produced the gradient (one made when the unit was
        gathered would run after every later-made node: a tied head's gradient would wait
        for the embedding's). A module whose parameters its parent reads keeps the slot
        use_views made."""
        if self.views is not None:
            for attr, i in entries:
                module.__dict__[attr] = _Slot.apply(self.views[i], self, i)

    def end_pass(self):
        self.views = None
        self.backward_hooked = False
        self.reduced = False
        self.grad_flat = None

    # ---- backward ----------------------------------------------------------------------
    def accumulate(self, index, grad):
        """Adds one parameter's gradient into this pass's flat gradient (allocated, zeroed,
        with the first)."""
        if self.grad_flat is None:
            self.grad_flat = torch.zeros(self.padded, dtype=self.owner.compute_dtype)
        start = self.offsets[index]
        self.grad_flat[start:start + grad.numel()].view_as(grad).add_(grad)

    def backward_done(self):
        """Every gradient of this unit is in: the full parameters are freed and the flat
        gradient goes out as one reduce-scatter (average over the shard group), started
        now. A unit none of whose parameters got a gradient sends zeros (every rank takes
        part in every reduce-scatter)."""
        o = self.owner
        self.reduced = True
        flat = self.grad_flat
        if flat is None:
            flat = torch.zeros(self.padded, dtype=o.compute_dtype)
        self.grad_flat = None
        self.free()
        o.reduce_started(self, flat)
