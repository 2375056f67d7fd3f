"""heft.torch.parallel.save_checkpoint / load_checkpoint / load_full_state_dict: a
ShardedDataParallel model and its optimizer as one multi-writer checkpoint (part K written by
rank K: its flat shards, their optimizer state and the layout), loadable at any other
sharded degree, hybrid degree or world size, or as a plain state_dict. Every part file is
read with torch.load(weights_only=True): tensors and plain data only, never a pickled object
(load_part; the CRC the C++ reader checks finds corruption, not a crafted file)."""
import io
import json
import pickle

import torch
import torch.distributed as dist

from .. import checkpoint_dir as ckdir

_unflatten = torch._C._nn.unflatten_dense_tensors


def _dist_on():
    return dist.is_available() and dist.is_initialized()


def _layout(sdp):
    g, r = sdp.shard_group, sdp.replicate_group
    units = []
    for u in sdp.units:
        members, offset = [], 0
        for like, places in zip(u.likes[:-1], u.slots):
            members.append({"names": [s.name for s in places], "shape": list(like.shape),
                            "offset": offset, "numel": like.numel()})
            offset += like.numel()
        units.append({"name": u.name, "numel": u.numel, "shard_numel": u.shard_numel,
                      "members": members})
    return {"shard_rank": g.rank, "shard_size": g.size, "replica": r.rank if r else 0,
            "units": units, "state_keys": sdp._state_keys}


def _unit_file(i):
    return f"unit-{i:05d}.pt"


def _bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


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
    optim = {}
    if optimizer is not None:
        for i, u in enumerate(model.units):
            state = optimizer.state.get(u.shard, {})
            optim[i] = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in state.items()}
    files = {"layout.json": json.dumps(_layout(model)).encode()}
    for i, u in enumerate(model.units):  # a file per unit: a reader loads one unit at a time
        files[_unit_file(i)] = _bytes({"shard": u.shard.detach(), "optimizer": optim.get(i, {})})
    if rank == 0:
        groups = [{k: v for k, v in g.items() if k != "params"}
                  for g in (optimizer.param_groups if optimizer is not None else [])]
        files["replicated.pt"] = _bytes({"buffers": dict(model.module.named_buffers()),
                                         "param_groups": groups})
    ckdir.save_part(directory, step, rank, files)
    if _dist_on():
        dist.barrier()
    if rank == 0:
        ckdir.commit(directory, step, world, meta or {}, keep)
    if _dist_on():
        dist.barrier()
    return step


def _read(directory, who):
    """(step, meta, layout, parts of replica 0 by shard rank, replicated state)."""
    step, meta, parts = ckdir.load_latest(directory)
    layouts = [json.loads(p.read("layout.json")) for p in parts]
    keep = sorted((k for k, l in enumerate(layouts) if l["replica"] == 0),
                  key=lambda k: layouts[k]["shard_rank"])
    replicated = load_part(parts[0], "replicated.pt", who)
    return step, meta, layouts[keep[0]], [parts[k] for k in keep], replicated


def _old_units(layout, parts, who):
    """Per old unit, one at a time: (its saved optimizer state of part 0, {name: full
    parameter}, {state key: {name: full state tensor}})."""
    for i, unit in enumerate(layout["units"]):
        blobs = [load_part(p, _unit_file(i), who) for p in parts]
        named = _named(unit, torch.cat([b["shard"].reshape(-1) for b in blobs]))
        states = {}
        for key, v in blobs[0]["optimizer"].items():
            if torch.is_tensor(v) and v.dim() == 1 and v.numel() == unit["shard_numel"]:
                states[key] = _named(unit, torch.cat([b["optimizer"][key].reshape(-1)
                                                      for b in blobs]))
        yield blobs[0]["optimizer"], named, states


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
    who = "load_full_state_dict"
    _, _, layout, parts, replicated = _read(directory, who)
    params = {}
    for _, named, _ in _old_units(layout, parts, who):
        params.update({k: v.clone() for k, v in named.items()})
    buffers = replicated["buffers"]
    return {k: (params[k] if k in params else buffers[k]).clone()
            for k in layout["state_keys"] if k in params or k in buffers}


def _copy_into(unit, named, target):
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


@torch.no_grad()
def load_checkpoint(directory, model, optimizer=None):
    """Loads the newest checkpoint into a ShardedDataParallel model (any degree) and its
    optimizer, one saved unit at a time; returns (step, meta)."""
    who = "load_checkpoint"
    step, meta, layout, parts, replicated = _read(directory, who)
    wanted = [places[0].name for u in model.units for places in u.slots]
    saved_names = {n for unit in layout["units"] for m in unit["members"] for n in m["names"]}
    missing = [n for n in wanted if n not in saved_names]
    if missing:
        raise KeyError(f"load_checkpoint: dir={directory!r}: the checkpoint has no parameter "
                       f"{', '.join(missing[:5])} of this model")
    new_state = {}
    for saved, named, states in _old_units(layout, parts, who):
        for u in model.units:
            _copy_into(u, named, u.shard.data)
            if optimizer is None:
                continue
            state = new_state.setdefault(u.shard, {})
            for key, value in saved.items():
                if key in states:
                    if key not in state:
                        state[key] = torch.zeros(u.shard_numel, dtype=value.dtype)
                    _copy_into(u, states[key], state[key])
                elif key not in state:
                    state[key] = value.clone() if torch.is_tensor(value) else value
    buffers = dict(model.module.named_buffers())
    for name, value in replicated["buffers"].items():
        if name in buffers:
            buffers[name].copy_(value)
    if optimizer is not None:
        for g, saved in zip(optimizer.param_groups, replicated["param_groups"]):
            g.update(saved)
        for shard, state in new_state.items():
            optimizer.state[shard] = state
    return step, meta
