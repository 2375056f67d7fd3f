"""heft.torch.parallel.save_checkpoint / load_checkpoint / load_full_state_dict: a
ShardedDataParallel model and its optimizer as one multi-writer checkpoint (part K written by
rank K: its flat shards, their optimizer state and the layout), loadable at any other
sharded degree, hybrid degree or world size, or as a plain state_dict."""
import io
import json
import sys

import torch
import torch.distributed as dist

from . import _checkpoint_dir as ckdir

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


def _bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save_checkpoint(directory, model, optimizer=None, step=None, meta=None, keep=2):
    """Collective: every rank writes its part; rank 0 commits. step: default one past the
    newest checkpoint in directory. Returns the step."""
    rank = dist.get_rank() if _dist_on() else 0
    world = dist.get_world_size() if _dist_on() else 1
    if step is None:
        found = ckdir.checkpoints(directory)
        step = found[0][0] + 1 if found else 1
        if _dist_on():
            t = torch.tensor([step], dtype=torch.int64)
            dist.broadcast(t, 0)
            step = int(t.item())
    optim = {}
    if optimizer is not None:
        for i, u in enumerate(model.units):
            state = optimizer.state.get(u.shard, {})
            optim[i] = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in state.items()}
    files = {"layout.json": json.dumps(_layout(model)).encode(),
             "shards.pt": _bytes({"shards": [u.shard.detach() for u in model.units],
                                  "optimizer": optim})}
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


def _read(directory):
    found = ckdir.load_latest(directory, lambda text: print(text, file=sys.stderr))
    if found is None:
        raise FileNotFoundError(f"load_checkpoint: dir={directory!r} holds no valid heft "
                                "multi-writer checkpoint")
    step, meta, parts = found
    layouts = [json.loads(p["layout.json"]) for p in parts]
    keep = sorted((k for k, l in enumerate(layouts) if l["replica"] == 0),
                  key=lambda k: layouts[k]["shard_rank"])
    blobs = [torch.load(io.BytesIO(parts[k]["shards.pt"])) for k in keep]
    replicated = torch.load(io.BytesIO(parts[0]["replicated.pt"]))
    return step, meta, layouts[keep[0]], blobs, replicated


def _named_full(layout, flats_of_unit):
    """{parameter name: full tensor} from each old unit's full flat tensor."""
    out = {}
    for unit, flat in zip(layout["units"], flats_of_unit):
        for m in unit["members"]:
            t = flat[m["offset"]:m["offset"] + m["numel"]].view(m["shape"])
            for name in m["names"]:
                out[name] = t
    return out


def _full_flats(layout, blobs, get):
    """Per old unit: its shards (get(blob, unit) each) back to back."""
    return [torch.cat([get(b, i).reshape(-1) for b in blobs]) for i in range(len(layout["units"]))]


def load_full_state_dict(directory):
    """The newest checkpoint as the unwrapped model's state_dict (full tensors; no process
    group needed)."""
    _, _, layout, blobs, replicated = _read(directory)
    params = _named_full(layout, _full_flats(layout, blobs, lambda b, i: b["shards"][i]))
    buffers = replicated["buffers"]
    return {k: (params[k] if k in params else buffers[k]).clone()
            for k in layout["state_keys"] if k in params or k in buffers}


def _new_shard(unit, named, dtype=torch.float32):
    names = [places[0].name for places in unit.slots]
    flat = torch._C._nn.flatten_dense_tensors([named[n].to(dtype) for n in names]) \
        if names else torch.zeros(0, dtype=dtype)
    flat = torch.cat([flat, flat.new_zeros(unit.padded - unit.numel)])
    lo = unit.owner.shard_group.rank * unit.shard_numel
    return flat[lo:lo + unit.shard_numel].clone()


@torch.no_grad()
def load_checkpoint(directory, model, optimizer=None):
    """Loads the newest checkpoint into a ShardedDataParallel model (any degree) and its
    optimizer; returns (step, meta)."""
    step, meta, layout, blobs, replicated = _read(directory)
    params = _named_full(layout, _full_flats(layout, blobs, lambda b, i: b["shards"][i]))
    for u in model.units:
        u.shard.copy_(_new_shard(u, params))
    buffers = dict(model.module.named_buffers())
    for name, value in replicated["buffers"].items():
        if name in buffers:
            buffers[name].copy_(value)
    if optimizer is None:
        return step, meta
    for g, saved in zip(optimizer.param_groups, replicated["param_groups"]):
        g.update(saved)
    old_state = [blobs[0]["optimizer"].get(i, {}) for i in range(len(layout["units"]))]
    keys = {k for s in old_state for k, v in s.items()}
    for u in model.units:
        state = {}
        for key in keys:
            first = next(s[key] for s in old_state if key in s)
            if torch.is_tensor(first) and first.dim() == 1 and any(
                    first.numel() == unit["shard_numel"] for unit in layout["units"]):
                flats = _full_flats(layout, blobs, lambda b, i: b["optimizer"][i][key])
                state[key] = _new_shard(u, _named_full(layout, flats), first.dtype)
            else:
                state[key] = first.clone() if torch.is_tensor(first) else first
        optimizer.state[u.shard] = state
    return step, meta
