"""What tsm.transform does to a model, on heft's strategies: the default tensor-parallel plan
for common transformer layouts (default_plan), activation checkpointing of repeated blocks
(checkpoint_blocks), and the check that every rank built the same weights (same_weights),
which tensor_parallel (it cuts slices of each rank's full model) and FSDP2 (it keeps each
rank's piece of what that rank holds, without a broadcast) both rely on. The split itself is
heft.torch.parallel.tensor_parallel's; nothing here computes a collective of its own."""
import fnmatch

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

# Modules that act element by element (or not at all) between an MLP's two nn.Linear layers.
_ELEMENTWISE = (nn.Dropout, nn.Identity, nn.GELU, nn.ReLU, nn.SiLU, nn.Tanh, nn.Sigmoid,
                nn.Mish, nn.LeakyReLU, nn.ELU, nn.Hardswish)


def _heads_ok(m):
    return (m._qkv_same_embed_dim and m.bias_k is None and not m.add_zero_attn)


def _mlp_pair(m):
    """(first, second) child names of a Sequential whose only nn.Linear children are two
    consecutive ones, first.out == second.in, with element-wise modules between; else None."""
    if not isinstance(m, nn.Sequential):
        return None
    children = list(m.named_children())
    linears = [i for i, (_, c) in enumerate(children) if type(c) is nn.Linear]
    if len(linears) != 2:
        return None
    a, b = linears
    first, second = children[a][1], children[b][1]
    between = [c for _, c in children[a + 1:b]]
    if first.out_features != second.in_features or not all(
            isinstance(c, _ELEMENTWISE) for c in between):
        return None
    return children[a][0], children[b][0]


def default_plan(model):
    """A tensor_parallel plan of exact module names for the layouts torch's and torchvision's
    transformers use: each nn.MultiheadAttention that 'heads' supports is split by heads
    (torchvision's VisionTransformer `encoder.layers.*.self_attention`, nn.TransformerEncoder
    `self_attn`); each MLP, a Sequential of two nn.Linear with element-wise modules between
    (torchvision's MLPBlock `mlp.0` / `mlp.3`), colwise then rowwise; nn.TransformerEncoderLayer
    and DecoderLayer's `linear1` / `linear2` alike. {} when nothing matches."""
    plan = {}
    for name, m in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(m, nn.MultiheadAttention) and _heads_ok(m) and name:
            plan[name] = "heads"
        elif isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
            if m.linear1.out_features == m.linear2.in_features:
                plan[prefix + "linear1"], plan[prefix + "linear2"] = "colwise", "rowwise"
        else:
            pair = _mlp_pair(m)
            if pair is not None:
                plan[prefix + pair[0]], plan[prefix + pair[1]] = "colwise", "rowwise"
    return plan


def repeated_blocks(model):
    """Names of the children of every nn.Sequential / nn.ModuleList whose children are at
    least two modules of one class holding parameters: a transformer's layers
    (`encoder.layers.encoder_layer_0`, ...). Outermost first; a block inside a block is left
    to its outer one."""
    found = []
    for name, m in model.named_modules():
        if not isinstance(m, (nn.Sequential, nn.ModuleList)) or any(
                name == b or name.startswith(b + ".") for b in found):
            continue
        children = list(m.named_children())
        kinds = {type(c) for _, c in children}
        if len(children) >= 2 and len(kinds) == 1 and any(
                True for _ in children[0][1].parameters()):
            found += [f"{name}.{n}" if name else n for n, _ in children]
    return found


def checkpoint_blocks(model, patterns):
    """Wraps the forward of each module named by `patterns` (fnmatch globs; True: the repeated
    blocks) in torch.utils.checkpoint (non-reentrant): its activations are recomputed in
    backward instead of kept. The module keeps its name and class, so FSDP2's fully_shard on it
    afterwards works as on any module. Returns the names wrapped; ValueError naming a pattern
    that matches nothing."""
    names = [n for n, _ in model.named_modules() if n]
    if patterns is True:
        chosen = repeated_blocks(model)
        if not chosen:
            raise ValueError("tsm.transform: activation_checkpointing=true found no repeated "
                             "block (a Sequential or ModuleList of two or more modules of one "
                             "class); give a list of module-name patterns instead")
    else:
        chosen = []
        for pattern in patterns:
            hit = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
            if not hit:
                raise ValueError(f"tsm.transform: activation_checkpointing pattern {pattern!r} "
                                 f"matches no module of the model (names look like {names[:3]})")
            chosen += [n for n in hit if n not in chosen]
    modules = dict(model.named_modules())
    for name in chosen:
        _wrap(modules[name])
    return chosen


def _wrap(module):
    inner = module.forward

    def forward(*args, **kwargs):
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    module.forward = forward


def same_weights(model, group):
    """Raises ValueError on every rank of `group` when its ranks hold different parameters or
    buffers (a fingerprint per tensor, all-gathered once), naming the first that differs."""
    tensors = list(model.state_dict().items())
    if dist.get_world_size(group) == 1 or not tensors:
        return
    prints = []
    for _, t in tensors:
        v = t.detach().reshape(-1).double()
        w = torch.arange(1, v.numel() + 1, dtype=torch.float64).remainder_(97).add_(1)
        prints.append(torch.stack([v.sum(), (v * w).sum(), v.square().sum()]))
    mine = torch.stack(prints)
    every = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(every, mine, group=group)
    for i, (name, _) in enumerate(tensors):
        if any(not torch.equal(other[i], mine[i]) and not (other[i].isnan().all() and
                                                           mine[i].isnan().all())
               for other in every):
            raise ValueError(
                f"tsm.transform: the ranks built different weights ({name!r} differs): "
                "tensor_parallel cuts each rank's slices from the full model that rank built, "
                "and FSDP2 keeps each rank's piece without a broadcast, so every rank must "
                "build the same one: set random_seed in the config (tsm.init seeds every rank "
                "with it) and build the model after tsm.init, or pass "
                "load_state_dict_from_rank0=True")


def from_rank0(model):
    """Every rank takes rank 0's parameters and buffers: one broadcast per tensor over the
    default group (backend heft)."""
    with torch.no_grad():
        for t in model.state_dict().values():
            dist.broadcast(t, 0)
