"""One sharding unit at run time: its flat shard, its gathered (full) buffer and the views
the module computes with (heft.torch.parallel.ShardedDataParallel's data path).

The collectives are the heft backend's (python/heft/torch/process_group.cc): one
all_gather_into_tensor / reduce_scatter_tensor per unit on flat contiguous buffers, which
the backend hands to heft's communicator without a copy. Python only starts and awaits
them."""
import torch
import torch.distributed as dist

from heft.torch.profile import phase

_flatten = torch._C._nn.flatten_dense_tensors
_unflatten = torch._C._nn.unflatten_dense_tensors


class Group:
    """A process group and this rank's place in it; size 1 needs no collective."""

    def __init__(self, pg, rank, size):
        self.pg, self.rank, self.size = pg, rank, size


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
    """spec: a _units.UnitSpec. owner: the ShardedDataParallel (counters, groups, options)."""

    def __init__(self, index, spec, owner, shard_fp32):
        self.index, self.name, self.module, self.owner = index, spec.name, spec.module, owner
        self.slots = spec.slots
        shard_group = owner.shard_group
        n = sum(p.numel() for p in spec.params)
        self.numel = n
        self.shard_numel = -(-max(n, 1) // shard_group.size)
        self.padded = self.shard_numel * shard_group.size
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
        self.full = torch.empty(self.padded, dtype=dtype)
        self.full_data = self.full.data  # writes through it leave the views' version alone
        self.anchor = torch.empty(0, requires_grad=requires_grad)
        self.work = None       # the all-gather in flight
        self.gathered = False
        self.views = None      # this pass's views (one autograd node per forward pass)
        self.backward_hooked = False
        self.reduced = False   # this pass's backward has ended
        self._free()

    # ---- gather / free ---------------------------------------------------------------
    def _free(self):
        self.full_data.storage().resize_(0)
        self.gathered = False

    def start_gather(self):
        if self.gathered or self.work is not None:
            return
        o = self.owner
        self.full_data.storage().resize_(self.padded)
        send = self.shard.detach()
        if send.dtype != o.compute_dtype:
            send = send.to(o.compute_dtype)
        o.counters["allgathers"] += 1
        if o.shard_group.size == 1:
            self.full_data.copy_(send)
            self.gathered = True
            return
        self.work = dist.all_gather_into_tensor(self.full_data, send, group=o.shard_group.pg,
                                                async_op=True)
        self.send = send

    def ensure_gathered(self):
        if self.work is not None:
            self.owner.counters["prefetched"] += 1
        self.start_gather()
        if self.work is not None:
            with phase("communication"):
                self.work.wait()
            self.work, self.send = None, None
        self.gathered = True
        o = self.owner
        o.counters["max_gathered"] = max(o.counters["max_gathered"],
                                         sum(1 for u in o.units if u.gathered))

    def free(self):
        if self.work is not None:
            self.work.wait()
            self.work, self.send = None, None
        if self.gathered:
            self._free()

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
        if flat.dtype != o.reduce_dtype:
            flat = flat.to(o.reduce_dtype)
        self.free()
        o.reduce_started(self, flat)
