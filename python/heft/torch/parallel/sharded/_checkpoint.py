"""heft.torch.parallel.save_checkpoint / load_checkpoint / load_full_state_dict: a
ShardedDataParallel model and its optimizer as one multi-writer checkpoint (part K written by
rank K: its flat shards, their optimizer state and the layout), loadable at any other
sharded degree, hybrid degree or world size, or as a plain state_dict.
The format is heft-train's sharded checkpoint (src/heft/parallel/sharded/sharded_checkpoint.h,
version 2): the C++ code writes the part's files from the tensors handed over here
(_c10d.parallel.sharded.write_part) and reads a checkpoint back as full tensors by name,
one saved flat at a time (.Reader), with LibTorch's unpickler, which runs no Python; so a
checkpoint of heft-train's sharded GPT loads here and the other way round. Checkpoints written by this module before
that format (layout.json without "format") are still read, each file with
torch.load(weights_only=True) (load_part)."""
import json
import pickle

import torch
import torch.distributed as dist

from heft.torch import _c10d

from .. import checkpoint_dir as ckdir

_unflatten = torch._C._nn.unflatten_dense_tensors


def _dist_on():
    return dist.is_available() and dist.is_initialized()


def _optimizer_name(optimizer):
    """The name heft-train gives the optimizer (adamw, sgd), else the class's name in lower
    case: a checkpoint of another optimizer is refused by heft-train, naming both."""
    if optimizer is None:
        return ""
    return {"AdamW": "adamw", "SGD": "sgd"}.get(type(optimizer).__name__,
                                                type(optimizer).__name__.lower())


def _flats(model, optimizer):
    """This rank's flats as the C++ writer takes them: the unit's shard, its shard-sized
    optimizer state, the step count, the members (a tied weight: several names)."""
    out = []
    for i, u in enumerate(model.units):
        state = optimizer.state.get(u.shard, {}) if optimizer is not None else {}
        tensors, step = {}, 0
        for key, value in state.items():
            if key == "step":
                step = int(value.item() if torch.is_tensor(value) else value)
            elif torch.is_tensor(value) and value.numel() == u.shard_numel:
                tensors[key] = value.detach()
            elif value is not None:
                raise ValueError(f"save_checkpoint: the optimizer's state {key!r} of unit "
                                 f"{u.name!r} is not a shard-sized tensor; heft's checkpoint "
                                 "keeps elementwise state and the step count only")
        members = [{"names": [s.name for s in places], "shape": list(like.shape),
                    "offset": off, "numel": like.numel()}
                   for like, places, off in zip(u.likes[:-1], u.slots, _offsets(u))]
        out.append({"param": u.shard.detach(), "state": tensors, "step": step, "unit": i,
                    "numel": u.numel, "shard_numel": u.shard_numel, "members": members})
    return out


def _offsets(unit):
    off = 0
    for like in unit.likes[:-1]:
        yield off
        off += like.numel()


def _extra(model, optimizer):
    """What heft-train's format leaves to the writer: the optimizer's hyperparameters and
    the state_dict's key order."""
    groups = [{k: v for k, v in g.items() if k != "params"}
              for g in (optimizer.param_groups if optimizer is not None else [])]
    return {"param_groups": groups, "state_keys": model._state_keys}


def _unit_file(i):
    return f"unit-{i:05d}.pt"


def _reason(text, limit=200):
    """The line of torch's weights-only refusal that names what was refused. It quotes the
    crafted file (a global's name): characters outside printable ASCII become '?', and it
    is cut at `limit` characters."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    found = [l for l in lines if "GLOBAL" in l or "nsupported" in l or "TorchScript" in l]
    line = (found or lines or ["?"])[0]
    line = line if len(line) <= limit else line[:limit] + "..."
    return "".join(c if " " <= c <= "~" else "?" for c in line)


def load_part(part, name, who):
    """torch.load of file `name` of a verified Part with weights_only=True, said explicitly:
    an explicit True is not overridden by TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD, which turns only
    the default off (torch/serialization.py). A file holding anything but tensors and plain
    data (a pickled class, function or TorchScript) raises ValueError naming the file;
    nothing in it runs."""
    path = part._paths[name]
    try:
        return torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as e:
        if isinstance(e, RuntimeError) and "weights_only" not in str(e):
            raise
        raise ValueError(f"{who}: {path}: holds something other than tensors and plain data "
                         f"({_reason(str(e))}); heft refuses to unpickle it") from None


def save_checkpoint(directory, model, optimizer=None, step=None, meta=None, keep=2):
    """Collective: every rank writes its part; rank 0 commits. step: default one past the
    newest checkpoint in directory. Returns the step."""
    rank = dist.get_rank() if _dist_on() else 0
    world = dist.get_world_size() if _dist_on() else 1
    if step is None:
        found = ckdir.steps(directory)
        step = found[0] + 1 if found else 1
        if _dist_on():
            t = torch.tensor([step], dtype=torch.int64)
            dist.broadcast(t, 0)
            step = int(t.item())
    files = _c10d.parallel.sharded.write_part(_flats(model, optimizer), {
        "optimizer": _optimizer_name(optimizer),
        "shard_size": model.shard_group.size, "shard_rank": model.shard_group.rank,
        "replicate_rank": model.replicate_group.rank if model.replicate_group else 0,
        "buffers": dict(model.module.named_buffers()) if rank == 0 else {},
        "extra_json": json.dumps(_extra(model, optimizer))})
    ckdir.save_part(directory, step, rank, files)
    if _dist_on():
        dist.barrier()
    if rank == 0:
        ckdir.commit(directory, step, world, meta or {}, keep)
    if _dist_on():
        dist.barrier()
    return step


REFUSAL = "holds something other than tensors and plain data"


class _Saved:
    """A checkpoint as full tensors by name, one saved flat at a time: names (every saved
    parameter name, tied ones included), flats() yielding (params, optimizer ({name: {state:
    tensor}}), step) per flat, buffers, param_groups, state_keys."""

    def __init__(self, names, flats, buffers, extra):
        self.names, self.flats, self.buffers = set(names), flats, buffers
        self.param_groups = extra.get("param_groups", [])
        self.state_keys = extra.get("state_keys")


def _with_aliases(piece):
    params, optim = dict(piece["params"]), dict(piece["optimizer"])
    for alias, name in piece["aliases"].items():
        params[alias] = params[name]
        if name in optim:
            optim[alias] = optim[name]
    return params, optim, piece["step"]


def _read(directory, who):
    """(step, meta, _Saved) of the newest valid checkpoint in directory."""
    step, meta, parts = ckdir.load_latest(directory)
    first = json.loads(parts[0].read("layout.json"))
    if first.get("format") != "heft-sharded":
        return step, meta, _read_legacy(parts, who)
    try:
        reader = _c10d.parallel.sharded.Reader([p._paths for p in parts], who)
        buffers = reader.buffers()
    except OSError as e:  # a refused file: the loaders' ValueError, as torch.load's was
        _refused(e)

    def flats():
        for i in range(len(reader)):
            try:
                piece = reader.read(i)
            except OSError as e:
                _refused(e)
            yield _with_aliases(piece)
    return step, meta, _Saved(reader.names(), flats, buffers, json.loads(reader.extra_json()))


def _refused(error):
    if REFUSAL in str(error):
        raise ValueError(str(error)) from None
    raise error


def _read_legacy(parts, who):
    """A checkpoint of this module before the one format: parts with unit-NNNNN.pt files of
    torch.save dictionaries {"shard", "optimizer"} and replicated.pt {"buffers",
    "param_groups"}."""
    layouts = [json.loads(p.read("layout.json")) for p in parts]
    keep = sorted((k for k, l in enumerate(layouts) if l["replica"] == 0),
                  key=lambda k: layouts[k]["shard_rank"])
    layout, kept = layouts[keep[0]], [parts[k] for k in keep]
    replicated = load_part(parts[0], "replicated.pt", who)

    def flats():
        for i, unit in enumerate(layout["units"]):
            blobs = [load_part(p, _unit_file(i), who) for p in kept]
            params = _named(unit, torch.cat([b["shard"].reshape(-1) for b in blobs]))
            optim, step = {}, 0
            for key, v in blobs[0]["optimizer"].items():
                if key == "step":
                    step = int(v.item() if torch.is_tensor(v) else v)
                elif torch.is_tensor(v) and v.dim() == 1 and v.numel() == unit["shard_numel"]:
                    joined = _named(unit, torch.cat([b["optimizer"][key].reshape(-1)
                                                     for b in blobs]))
                    for name, t in joined.items():
                        optim.setdefault(name, {})[key] = t
            yield params, optim, step
    names = [n for unit in layout["units"] for m in unit["members"] for n in m["names"]]
    return _Saved(names, flats, replicated["buffers"],
                  {"param_groups": replicated["param_groups"], "state_keys": layout["state_keys"]})


def _named(unit, flat):
    out = {}
    for m in unit["members"]:
        t = flat[m["offset"]:m["offset"] + m["numel"]].view(m["shape"])
        for name in m["names"]:
            out[name] = t
    return out


def load_full_state_dict(directory):
    """The newest checkpoint as the unwrapped model's state_dict (full tensors; no process
    group needed)."""
    _, _, saved = _read(directory, "load_full_state_dict")
    params = {}
    for named, _, _ in saved.flats():
        params.update(named)
    buffers = saved.buffers
    keys = saved.state_keys or list(params) + list(buffers)
    return {k: (params[k] if k in params else buffers[k]).clone()
            for k in keys if k in params or k in buffers}


def copy_into(unit, named, target):
    """Copies the parts of `named`'s tensors that fall in this rank's shard of `unit` into
    target (a flat shard-sized tensor)."""
    lo, offset = unit.owner.shard_group.rank * unit.shard_numel, 0
    for like, places in zip(unit.likes[:-1], unit.slots):
        n = like.numel()
        a, b = max(lo, offset), min(lo + unit.shard_numel, offset + n)
        t = named.get(places[0].name)
        if t is not None and a < b:
            target[a - lo:b - lo].copy_(t.reshape(-1)[a - offset:b - offset])
        offset += n


def _step_tensor(optimizer, step):
    """The step count as torch's Adam family keeps it, or None for an optimizer without one."""
    if "betas" not in getattr(optimizer, "defaults", {}):
        return None
    return torch.tensor(float(step), dtype=torch.float32)


def _as_saved(value, current):
    """A hyperparameter read back from JSON in the type the optimizer has (betas: a tuple)."""
    return tuple(value) if isinstance(current, tuple) and isinstance(value, list) else value


@torch.no_grad()
def load_checkpoint(directory, model, optimizer=None):
    """Loads the newest checkpoint (heft.torch's or heft-train's) into a ShardedDataParallel
    model (any degree) and its optimizer, one saved flat at a time; returns (step, meta)."""
    who = "load_checkpoint"
    step, meta, saved = _read(directory, who)
    wanted = [places[0].name for u in model.units for places in u.slots]
    missing = [n for n in wanted if n not in saved.names]
    if missing:
        raise KeyError(f"load_checkpoint: dir={directory!r}: the checkpoint has no parameter "
                       f"{', '.join(missing[:5])} of this model")
    new_state = {}
    for named, optim, count in saved.flats():
        for u in model.units:
            copy_into(u, named, u.shard.data)
            if optimizer is None:
                continue
            names = [places[0].name for places in u.slots]
            state = new_state.setdefault(u.shard, {})
            for key in sorted({k for n in names for k in optim.get(n, {})}):
                part = {n: optim[n][key] for n in names if key in optim.get(n, {})}
                if key not in state:
                    state[key] = torch.zeros(u.shard_numel, dtype=next(iter(part.values())).dtype)
                copy_into(u, part, state[key])
                steps = _step_tensor(optimizer, count)
                if steps is not None:
                    state["step"] = steps
    buffers = dict(model.module.named_buffers())
    for name, value in saved.buffers.items():
        if name in buffers:
            buffers[name].copy_(value)
    if optimizer is not None:
        for g, groups in zip(optimizer.param_groups, saved.param_groups):
            g.update({k: _as_saved(v, g.get(k)) for k, v in groups.items()})
        for shard, state in new_state.items():
            if state:
                optimizer.state[shard] = state
    return step, meta
