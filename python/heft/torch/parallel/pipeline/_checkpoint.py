"""Checkpoints of a heft.torch.parallel.Pipeline (with or without a tensor plan) that reshard
across pipeline and tensor degrees: heft's multi-writer checkpoint directory (the C++
CheckpointDirectory through ../checkpoint_dir.py, the format heft-train and save_checkpoint
use). Part K is world rank K's: layout.json (its stage, chunks' layers, tensor rank and size,
data coordinate, and how each tensor was cut: {key: [dim, parts]}, dim -1 whole) and, on the
ranks of data coordinate 0, state.pt ({key: slice} and each parameter's optimizer state
sliced alike). Keys are the model's: the layer's index in the sequence, then its own name,
so the full state is a plain nn.Sequential's state_dict. Slices are joined and re-cut by
heft's C++ join_slices / take_slice. Parts are read with torch.load(weights_only=True):
tensors and plain data only (load_part, ../sharded/_checkpoint.py). See docs/pipeline.md,
"Checkpoints"."""
import io
import json

import torch
import torch.distributed as dist

from heft.torch import _c10d
from .. import checkpoint_dir as ckdir
from ..sharded._checkpoint import copy_into, load_part
from ..sharded._state import gather_flat, named_full_params

_T = _c10d.parallel.tensor
FORMAT = "heft-pipeline-layout-1"


def _sharded(chunk):
    return hasattr(chunk, "units") and hasattr(chunk, "shard_group")


def _unwrap(chunk):
    return chunk.module if hasattr(chunk, "reducer") or _sharded(chunk) else chunk


def _chunk_state(chunk, optimizer):
    """{key: {"tensor": t, "optimizer": {...}}} of one chunk (its tensor slices). A
    ShardedDataParallel chunk's parameters and optimizer state are gathered over its shard
    group first (collective there)."""
    if not _sharded(chunk):
        names = {id(p) for p in chunk.parameters()}
        state = {}
        for key, t in _unwrap(chunk).state_dict(keep_vars=True).items():
            state[key] = {"tensor": t.detach().clone()}
            if optimizer is not None and id(t) in names:
                state[key]["optimizer"] = {k: (v.detach().clone() if torch.is_tensor(v) else v)
                                           for k, v in optimizer.state.get(t, {}).items()}
        return state
    state = {k: {"tensor": v} for k, v in chunk.full_state_dict().items()}
    for u in chunk.units:
        names = [s.name for places in u.slots for s in places]
        saved = optimizer.state.get(u.shard, {}) if optimizer is not None else {}
        for name in names:
            state[name].setdefault("optimizer", {})
        for key, v in saved.items():
            if torch.is_tensor(v) and v.dim() == 1 and v.numel() == u.shard_numel:
                full = named_full_params(chunk, u, gather_flat(chunk, u, v))
                for name in names:
                    state[name]["optimizer"][key] = full[name].clone()
            else:
                for name in names:
                    state[name]["optimizer"][key] = v.clone() if torch.is_tensor(v) else v
    return state


def _splits(module):
    """{state key: (dim, parts)} of the tensor-parallel layers' parameters in module."""
    out = {}
    for name, m in module.named_modules():
        for p, split in getattr(m, "splits", {}).items():
            out[f"{name}.{p}" if name else p] = tuple(split)
    return out


def _bytes(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def save(pipe, directory, optimizer=None, step=None, meta=None, keep=2):
    """Collective over the world: every rank writes its part, rank 0 commits. Returns step."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if step is None:
        found = ckdir.steps(directory)
        t = torch.tensor([found[0] + 1 if found else 1], dtype=torch.int64)
        dist.broadcast(t, 0)
        step = int(t.item())
    mesh = pipe.mesh
    splits, state = {}, {}
    for chunk in pipe.chunks:
        cut = _splits(_unwrap(chunk))
        for key, entry in _chunk_state(chunk, optimizer).items():
            splits[key] = list(cut.get(key, (-1, 1)))
            state[key] = entry
    layout = {"format": FORMAT, "stage": pipe.stage, "layers": [list(r) for r in
                                                                  pipe.layer_ranges],
              "tensor_rank": mesh.coordinate("tensor") if pipe.tensors > 1 else 0,
              "tensor_size": pipe.tensors, "data": mesh.coordinate("data"), "splits": splits}
    files = {"layout.json": json.dumps(layout).encode()}
    if layout["data"] == 0:
        files["state.pt"] = _bytes(state)
    if rank == 0:
        groups = [{k: v for k, v in g.items() if k != "params"}
                  for g in (optimizer.param_groups if optimizer is not None else [])]
        files["param_groups.pt"] = _bytes(groups)
    ckdir.save_part(directory, step, rank, files)
    dist.barrier()
    if rank == 0:
        about = {"format": FORMAT, "pipeline": pipe.stages, "tensor": pipe.tensors,
                 "virtual_stages": pipe.virtual_stages, "first": list(pipe.first),
                 "layer_stage": _layer_stage(pipe)}
        about.update(meta or {})
        ckdir.commit(directory, step, world, about, keep)
    dist.barrier()
    return step


def _layer_stage(pipe):
    """Each layer's pipeline stage (layer -> stage), from the partition."""
    ends = list(pipe.first[1:]) + [pipe.layers_total]
    return [k % pipe.stages for k, (a, b) in enumerate(zip(pipe.first, ends))
            for _ in range(a, b)]


def _read(directory, who):
    step, meta, parts = ckdir.load_latest(directory, who)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{who}: dir={directory!r}: the checkpoint is not a Pipeline's "
                         f"(format {meta.get('format')!r}, expected {FORMAT!r})")
    return step, meta, parts


def full_state(directory, who="Pipeline.load_full_state_dict"):
    """(step, meta, {key: full tensor}, {key: full optimizer state}, param_groups): every
    slice joined in tensor-rank order (C++ join_slices). Needs no process group."""
    step, meta, parts = _read(directory, who)
    pieces, splits = {}, {}
    for part in parts:
        layout = json.loads(part.read("layout.json"))
        if "state.pt" not in part:
            continue
        for key, entry in load_part(part, "state.pt", who).items():
            pieces.setdefault(key, {})[layout["tensor_rank"]] = entry
            splits[key] = tuple(layout["splits"][key])
    params, optim = {}, {}
    for key, by_rank in pieces.items():
        dim, n = splits[key]
        entries = [by_rank[r] for r in sorted(by_rank)]
        slices = [e["tensor"] for e in entries]
        params[key] = slices[0] if dim < 0 else _T.join_slices(slices, dim, n)
        if "optimizer" in entries[0]:
            optim[key] = {k: (_T.join_slices([e["optimizer"][k] for e in entries], dim, n)
                              if dim >= 0 and torch.is_tensor(v) and v.shape == slices[0].shape
                              else v)
                          for k, v in entries[0]["optimizer"].items()}
    groups = load_part(parts[0], "param_groups.pt", who) if "param_groups.pt" in parts[0] else []
    return step, meta, params, optim, groups


@torch.no_grad()
def load(pipe, directory, optimizer=None):
    """Loads the newest Pipeline checkpoint of directory, saved at any pipeline / tensor /
    data degree, into pipe (this rank's layers, re-cut for its tensor rank) and optimizer.
    Returns (step, meta). Every rank reads the whole checkpoint (no collective)."""
    who = "Pipeline.load_checkpoint"
    step, meta, params, optim, groups = full_state(directory, who)
    rank, size = (pipe.mesh.coordinate("tensor"), pipe.tensors) if pipe.tensors > 1 else (0, 1)
    for chunk in pipe.chunks:
        if _sharded(chunk):
            _load_sharded(chunk, params, optim, optimizer, rank, size, who, directory)
            continue
        m = _unwrap(chunk)
        cut = _splits(m)
        for key, t in m.state_dict(keep_vars=True).items():
            if key not in params:
                raise KeyError(f"{who}: dir={directory!r}: the checkpoint has no {key!r} (a "
                               "checkpoint of another model?)")
            dim, n = cut.get(key, (-1, 1))
            what = f"{who}: {key}"
            t.copy_(_T.take_slice(params[key], dim, n, rank, size, what))
            if optimizer is not None and key in optim and isinstance(t, torch.nn.Parameter):
                full = params[key]
                optimizer.state[t] = {
                    k: (_T.take_slice(v, dim, n, rank, size, what).clone()
                        if torch.is_tensor(v) and v.shape == full.shape else
                        (v.clone() if torch.is_tensor(v) else v))
                    for k, v in optim[key].items()}
    if optimizer is not None:
        for g, saved in zip(optimizer.param_groups, groups):
            g.update(saved)
    return step, meta


def _load_sharded(sdp, params, optim, optimizer, rank, size, who, directory):
    """This rank's shard of each unit (and its optimizer state) from the full tensors, cut
    for its tensor rank first (no collective)."""
    cut = _splits(sdp.module)

    def mine(key, t):
        dim, n = cut.get(key, (-1, 1))
        return _T.take_slice(t, dim, n, rank, size, f"{who}: {key}")

    for u in sdp.units:
        names = [s.name for places in u.slots for s in places]
        missing = [n for n in names if n not in params]
        if missing:
            raise KeyError(f"{who}: dir={directory!r}: the checkpoint has no {missing[0]!r}")
        copy_into(u, {n: mine(n, params[n]) for n in names}, u.shard.data)
        if optimizer is None or names[0] not in optim:
            continue
        state = {}
        for key, v in optim[names[0]].items():
            if torch.is_tensor(v) and v.shape == params[names[0]].shape:
                state[key] = torch.zeros(u.shard_numel, dtype=v.dtype)
                copy_into(u, {n: mine(n, optim[n][key]) for n in names}, state[key])
            else:
                state[key] = v.clone() if torch.is_tensor(v) else v
        optimizer.state[u.shard] = state
    buffers = dict(sdp.module.named_buffers())
    for key, b in buffers.items():
        if key in params:
            b.copy_(mine(key, params[key]))
