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
    _load_flats(model, optimizer, saved.flats(), saved.buffers, saved.param_groups)
    return step, meta


def _load_flats(model, optimizer, flats, buffers, param_groups):
    """Each (params by name, {name: {state key: full tensor}}, step) of flats copied into
    this rank's shards and their optimizer state; then the buffers and the groups'
    hyperparameters."""
    new_state = {}
    for named, optim, count in flats:
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
    own = dict(model.module.named_buffers())
    for name, value in buffers.items():
        if name in own:
            own[name].copy_(value)
    if optimizer is not None:
        for g, groups in zip(optimizer.param_groups, param_groups):
            g.update({k: _as_saved(v, g.get(k)) for k, v in groups.items() if k != "params"})
        for shard, state in new_state.items():
            if state:
                optimizer.state[shard] = state


# ---- torch's full state dicts (FSDP2's, DCP's) -------------------------------------------------
def _torch_optim(optim_by_name, step, param_groups, names):
    """torch's full optimizer state_dict by parameter name (get_state_dict's form with
    full_state_dict=True): {"state": {name: {"step": tensor, key: tensor}}, "param_groups":
    [{hyperparameters..., "params": [names]}]}; one group (heft's checkpoints keep the
    groups' hyperparameters, not which parameters each held)."""
    if len(param_groups) > 1:
        raise ValueError(f"torch_state_dicts: the checkpoint's optimizer has "
                         f"{len(param_groups)} parameter groups; torch's form needs each "
                         "group's parameter names, which heft's checkpoint does not keep: "
                         "use one group")
    state = {}
    for name, keys in optim_by_name.items():
        state[name] = dict(keys)
        if step is not None:
            state[name]["step"] = torch.tensor(float(step))
    groups = [dict(g, params=list(names)) for g in param_groups] or [{"params": list(names)}]
    return {"state": state, "param_groups": groups}


def torch_state_dicts(directory):
    """The newest heft checkpoint (ShardedDataParallel's or heft-train's sharded GPT's) in
    one process, no process group: (model_state_dict, optimizer_state_dict) as torch's
    get_state_dict gives them with full_state_dict=True, full tensors by parameter name. An
    FSDP2 model (any world size) loads them with torch.distributed.checkpoint.state_dict's
    set_state_dict(model, optimizer, model_state_dict=..., optim_state_dict=...,
    options=StateDictOptions(full_state_dict=True)); docs/sharded.md."""
    _, _, saved = _read(directory, "torch_state_dicts")
    params, optim, step, order = {}, {}, None, []
    for named, by_name, count in saved.flats():
        params.update(named)
        order += [n for n in named if n not in order]
        for name, keys in by_name.items():
            optim[name] = {k: v.clone() for k, v in keys.items()}
        step = count if by_name else step
    keys = saved.state_keys or list(params) + list(saved.buffers)
    model_sd = {k: (params[k] if k in params else saved.buffers[k]).clone()
                for k in keys if k in params or k in saved.buffers}
    names = [n for n in keys if n in params] or order
    return model_sd, _torch_optim({n: optim[n] for n in names if n in optim}, step,
                                  saved.param_groups, names)


@torch.no_grad()
def load_torch_state_dicts(model, model_state_dict, optimizer=None, optim_state_dict=None):
    """torch's full state dicts by parameter name (an FSDP2 run's, from get_state_dict with
    full_state_dict=True or read from its DCP folder by read_dcp) into a ShardedDataParallel
    model and its optimizer (torch's per-parameter state becomes each shard's part; the
    groups' hyperparameters are taken in order). Each rank passes the full dicts."""
    wanted = [places[0].name for u in model.units for places in u.slots]
    missing = [n for n in wanted if n not in model_state_dict]
    if missing:
        raise KeyError("load_torch_state_dicts: model_state_dict has no parameter "
                       f"{', '.join(missing[:5])} of this model")
    optim, groups, step = {}, [], 0
    if optimizer is not None:
        if optim_state_dict is None:
            raise ValueError("load_torch_state_dicts: optimizer given without "
                             "optim_state_dict")
        for name, keys in optim_state_dict.get("state", {}).items():
            optim[name] = {k: v for k, v in keys.items() if k != "step"}
            if "step" in keys:
                v = keys["step"]
                step = int(v.item() if torch.is_tensor(v) else v)
        groups = optim_state_dict.get("param_groups", [])
    own = dict(model.module.named_buffers())
    buffers = {k: v for k, v in model_state_dict.items() if k in own}
    _load_flats(model, optimizer, [(model_state_dict, optim, step)], buffers, groups)


def read_dcp(directory):
    """A torch.distributed.checkpoint folder (DCP, as FSDP2 scripts save) as one plain
    state dict of full tensors, in one process: what torch's dcp_to_torch_save writes,
    loaded with weights_only=True."""
    import os
    import tempfile
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    if not os.path.isfile(os.path.join(directory, ".metadata")):
        raise FileNotFoundError(f"read_dcp: {directory!r} is not a torch.distributed.checkpoint "
                                "folder (no .metadata)")
    with tempfile.TemporaryDirectory(prefix="heft-dcp-") as tmp:
        path = os.path.join(tmp, "full.pt")
        dcp_to_torch_save(directory, path)
        return torch.load(path, weights_only=True)
