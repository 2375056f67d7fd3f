"""heft.torch.parallel.deferred_init: build a model without allocating it, then let each
strategy materialize what its rank holds only: ShardedDataParallel its shards (materialize),
Pipeline its stage's layers and tensor_parallel its slices (materialize_held). Below the rooms: the
sharded, pipeline and tensor rooms all materialize from here.

Inside the context every factory operation makes a meta tensor and every operation touching
one is recorded (a TorchDispatchMode at the aten level, so nn.init, reset_parameters and
in-place fills are all seen). Materializing replays the record in order on CPU, so the
random operations draw the same numbers as one process building the model after the same
seed would; each storage is freed after its last recorded use, a parameter's after its
elements in this rank's shard were copied out. Peak memory: the largest set of tensors the
constructor keeps alive at once (usually one module's parameters), never the whole model.
After materializing, torch's default generator is where one process's would be after the
constructor. Not replayed: operations that leave the dispatcher (numpy, .tolist(), Python
arithmetic on tensor values) raise on meta tensors inside the context; tensors kept in plain
attributes (neither parameter nor buffer) stay meta."""
import contextlib
import functools

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_META = torch.device("meta")
_recorders = []  # live records, newest last


def _key(t):
    return t.storage()._cdata


class _Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.entries = []   # (func, args, kwargs, outputs, generator state or None)
        self.keys = set()   # storages created inside the context
        self.peak_bytes = 0  # the most bytes the replay held at once (materialize)
        self.last_random_state = self.exit_state = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        if not tensors and any(a.name == "device" for a in func._schema.arguments):
            if kwargs.get("device") not in (None, "cpu", torch.device("cpu")):
                return func(*args, **kwargs)  # an explicit other device: not ours
            out = func(*args, **dict(kwargs, device=_META))
        elif any(t.is_meta and _key(t) in self.keys for t in tensors):
            out = func(*args, **kwargs)
        else:
            return func(*args, **kwargs)
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        for o in outs:
            if o.is_meta:
                self.keys.add(_key(o))
        state = None
        if any(a.name == "generator" for a in func._schema.arguments):
            # Meta draws do not advance the generator: a state that differs from the last
            # random operation's is a seed set in between, which the replay sets too.
            now = torch.get_rng_state()
            if self.last_random_state is None or not torch.equal(now, self.last_random_state):
                state = now
            self.last_random_state = now
        self.entries.append((func, args, kwargs, outs, state))
        return out


@contextlib.contextmanager
def deferred_init():
    """Modules built inside hold meta tensors; ShardedDataParallel, Pipeline and
    tensor_parallel materialize what each rank holds."""
    record = _Record()
    with record:
        yield record
    record.exit_state = torch.get_rng_state()
    _recorders.append(record)


def find(module):
    """The record that built module's meta parameters, or None (no meta parameters)."""
    metas = [p for p in module.parameters() if p.is_meta]
    if not metas:
        return None
    for r in reversed(_recorders):
        if _key(metas[0]) in r.keys:
            return r
    raise RuntimeError("heft.torch.parallel: the module has meta parameters that "
                       "heft.torch.parallel.deferred_init() did not record (build it inside "
                       "`with heft.torch.parallel.deferred_init():`)")


def materialize(record, module, specs, engine):
    """Replays `record`; returns one fp32 shard per spec (this rank's, of the engine's shard
    group, padded as the engine pads) and puts real buffers into `module`."""
    shards, wanted = [], {}
    rank = engine.shard_rank
    for spec in specs:
        n = sum(p.numel() for p in spec.params)
        shard_numel = engine.shard_numel_for(n)
        shard = torch.zeros(shard_numel)
        lo, offset = rank * shard_numel, 0
        for p in spec.params:
            a, b = max(lo, offset), min(lo + shard_numel, offset + p.numel())
            if a < b:
                wanted.setdefault(_key(p), []).append(
                    (p, _copier(shard, a - lo, a - offset, b - a)))
            offset += p.numel()
        shards.append(shard)
    _replay(record, module, wanted)
    return shards


def _copier(shard, at, start, count):
    def copy(full):
        shard[at:at + count].copy_(full.reshape(-1)[start:start + count])
    return copy


def materialize_held(record, module, keep, within=None):
    """Replays `record` and puts real tensors in place of `module`'s meta parameters and
    buffers: each meta parameter p of `within` (default: module) becomes a Parameter of
    keep(p, full) (requires_grad as p's), where full is p's final value, valid only during
    the call, and keep returns what this rank holds of it (a clone, a slice); every other
    meta parameter and buffer becomes an empty tensor of its dtype (never allocated whole).
    Returns ({id(meta parameter): its new Parameter}, the replay's peak bytes: the most it
    held at once)."""
    within = module if within is None else within
    made, wanted = {}, {}

    def hold(p, full):
        made[id(p)] = torch.nn.Parameter(keep(p, full), requires_grad=p.requires_grad)

    for p in dict.fromkeys(q for q in within.parameters() if q.is_meta):
        wanted.setdefault(_key(p), []).append((p, functools.partial(hold, p)))
    _replay(record, within, wanted)
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None and p.is_meta:
                new = made.get(id(p))
                m._parameters[name] = new if new is not None else torch.nn.Parameter(
                    torch.empty(0, dtype=p.dtype), requires_grad=p.requires_grad)
        for name, b in m._buffers.items():
            if b is not None and b.is_meta:
                m._buffers[name] = torch.empty(0, dtype=b.dtype)
    return made, record.peak_bytes


def _replay(record, module, wanted):
    """The replay under materialize and materialize_held: wanted {storage: [(meta tensor, fn(full))]}."""
    buffers = {}
    for mod in module.modules():
        for name, buf in mod._buffers.items():
            if buf is not None and buf.is_meta:
                buffers.setdefault(_key(buf), []).append((mod, name, buf))
    kills, after = _plan(record.entries)
    real = {}

    def to_real(t):
        if isinstance(t, torch.Tensor) and t.is_meta:
            return real[_key(t)].as_strided(t.shape, t.stride(), t.storage_offset())
        return t

    saved = torch.get_rng_state()
    try:
        for i, (func, args, kwargs, outs, state) in enumerate(record.entries):
            if state is not None:
                torch.set_rng_state(state)
            if i in kills and kills[i][0] not in real:  # the old value was dead: a fresh one
                key, numel, dtype = kills[i]
                real[key] = torch.empty(numel, dtype=dtype)
            kw = {k: v for k, v in kwargs.items() if not (k == "device" and v == _META)}
            out = func(*tree_map(to_real, args), **tree_map(to_real, kw))
            for m, r in zip(outs, [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]):
                if _key(m) not in real:
                    real[_key(m)] = torch.tensor([], dtype=r.dtype).set_(r.storage())
            record.peak_bytes = max(record.peak_bytes,
                                    sum(b.numel() * b.element_size() for b in real.values()))
            for key, final in after.get(i, ()):
                base = real.pop(key, None)
                if final and base is not None:
                    _retire(key, base, wanted, buffers)
    except BaseException:
        torch.set_rng_state(saved)
        raise
    # Where one process's generator is after the constructor: after the last random draw,
    # unless the constructor seeded again after it.
    if record.last_random_state is None or not torch.equal(record.exit_state,
                                                           record.last_random_state):
        torch.set_rng_state(record.exit_state)


# In-place operations that overwrite every element of their tensor without reading it.
_OVERWRITE = {"normal_", "uniform_", "fill_", "zero_", "bernoulli_", "exponential_", "random_",
              "cauchy_", "log_normal_", "geometric_"}


def _plan(entries):
    """Liveness of each recorded storage. kills: entry -> (storage, numel, dtype) for an
    operation that overwrites the whole storage, whose earlier value is then dead (a
    constructor's default init redone by the model's own init at the end). after: entry ->
    [(storage, final)]: storages to release after that entry, final ones (no later use)
    first copied out. So a storage is held only while its value can still matter."""
    uses, kills = {}, {}
    for i, (func, args, kwargs, outs, _) in enumerate(entries):
        keys = list(dict.fromkeys(_key(t) for t in tree_flatten((args, kwargs))[0] + outs
                                  if isinstance(t, torch.Tensor) and t.is_meta))
        for k in keys:
            uses.setdefault(k, []).append(i)
        a = args[0] if args else None
        if func.overloadpacket.__name__ in _OVERWRITE and isinstance(a, torch.Tensor) and \
                a.is_meta and keys == [_key(a)] and a.storage_offset() == 0 and \
                a.is_contiguous() and a.numel() == a.storage().size():
            kills[i] = (_key(a), a.numel(), a.dtype)
    after = {}
    for k, idx in uses.items():
        for j, nxt in zip(idx, idx[1:] + [None]):
            if nxt is None or kills.get(nxt, (None,))[0] == k:
                after.setdefault(j, []).append((k, nxt is None))
    return kills, after


def _retire(key, base, wanted, buffers):
    """A storage's last recorded use is over: hand out what is kept of it."""
    for p, fn in wanted.pop(key, []):
        fn(base.as_strided(p.shape, p.stride(), p.storage_offset()))
    for mod, name, buf in buffers.pop(key, []):
        mod._buffers[name] = base.as_strided(buf.shape, buf.stride(), buf.storage_offset()).clone()
