"""heft.torch.parallel.tensor_parallel: tensor parallelism by plan for your own PyTorch model,
on heft's C++ tensor layers (src/heft/parallel/tensor/tensor_parallel.h) through
_c10d.parallel.tensor: the regions (copy_to / reduce_from / gather_from, autograd functions
whose collectives are C++), take_slice / join_slices and the vocab-parallel cross-entropy.
This file only swaps modules; _tensor_parallel_plan.py reads the plan (plan_layers). See
docs/parallel.md, "Tensor parallelism by plan".

A plan maps glob patterns of module names (fnmatch on named_modules() names) to
  "colwise"  nn.Linear cut by output features; its output stays split over the ranks when a
             rowwise layer consumes it (the next nn.Linear in registration order), else it is
             gathered (a head feeding your loss)
  "rowwise"  nn.Linear cut by input features; takes the split output of the colwise layers
             just before it and all-reduces (the bias added once, after the sum)
  "vocab"    nn.Embedding cut by vocabulary rows (one all-reduce), or an nn.Linear head cut
             by vocabulary rows whose logits stay split, for vocab_parallel_cross_entropy
  "heads"    nn.MultiheadAttention split by heads: in_proj's q, k, v rows of this rank's
             heads, out_proj rowwise (_heads_attention.py)
A fused q/k/v projection (a colwise layer giving 3x its rowwise's input) is cut as 3 parts so
each rank keeps its heads' q, k and v, and the nearest enclosing module's heads / n_head /
num_heads is divided by T; likewise three colwise q, k, v layers under such a module.
"""
import weakref

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _c10d
from ._tensor_parallel_plan import plan_layers

_T = _c10d.parallel.tensor
_groups = weakref.WeakKeyDictionary()  # DeviceMesh -> its tensor group as a C++ Group


def _group(mesh, who):
    from ._mesh import DeviceMesh
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{who}: mesh must be a heft.torch.parallel.DeviceMesh, got "
                        f"{type(mesh).__name__}")
    if mesh not in _groups:
        _groups[mesh] = _c10d.parallel.Group(mesh.group("tensor"))
    return _groups[mesh]


def _slice(full, dim, parts, group, what):
    piece = _T.take_slice(full.detach(), dim, parts, group.rank, group.size, what)
    return nn.Parameter(piece.clone(), requires_grad=full.requires_grad)


class TensorParallelLayer(nn.Module):
    """Base of heft's parallel layers: holds the C++ Group (its autograd nodes refer to it)
    and `splits`, {parameter name: (dim, parts)} of how each parameter was cut from the full
    one (dim -1: whole), which full_state_dict joins back."""

    def __init__(self, group, splits):
        super().__init__()
        self.group, self.splits = group, splits

    def _params(self, full, what, shared):
        for name, (dim, parts) in self.splits.items():
            p = getattr(full, name)
            if p is None:
                self.register_parameter(name, None)
            elif id(p) in shared:  # tied to a parameter another layer already cut alike
                setattr(self, name, shared[id(p)])
            else:
                setattr(self, name, _slice(p, dim, parts, self.group, what))
                shared[id(p)] = getattr(self, name)


class ColwiseLinear(TensorParallelLayer):
    """nn.Linear holding rows (output features) [r·out/T, (r+1)·out/T) of each of `parts`
    blocks; input replicated; output split (..., out/T), or gathered (..., out)."""

    def __init__(self, full, group, parts=1, gather_output=False, shared=None, what=""):
        super().__init__(group, {"weight": (0, parts), "bias": (0, parts)})
        self.in_features, self.parts, self.gather_output = full.in_features, parts, gather_output
        self.out_features = full.out_features // group.size
        self._params(full, what, {} if shared is None else shared)

    def forward(self, x):
        y = F.linear(_T.copy_to_region(x, self.group), self.weight, self.bias)
        return _T.gather_from_region(y, self.group) if self.gather_output else y

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features} (of "
                f"{self.out_features * self.group.size}), parts={self.parts}, "
                f"gather_output={self.gather_output}, rank={self.group.rank}/{self.group.size}")


class RowwiseLinear(TensorParallelLayer):
    """nn.Linear holding columns (input features) [r·in/T, (r+1)·in/T); input split, output
    all-reduced (replicated), the bias whole and added after the sum."""

    def __init__(self, full, group, shared=None, what=""):
        super().__init__(group, {"weight": (1, 1), "bias": (-1, 1)})
        self.in_features, self.out_features = full.in_features // group.size, full.out_features
        self._params(full, what, {} if shared is None else shared)

    def forward(self, x):
        y = _T.reduce_from_region(F.linear(x, self.weight), self.group)
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return (f"in_features={self.in_features} (of {self.in_features * self.group.size}), "
                f"out_features={self.out_features}, rank={self.group.rank}/{self.group.size}")


class VocabEmbedding(TensorParallelLayer):
    """nn.Embedding holding rows [first, first + V/T); ids outside them give zeros, one
    all-reduce makes the sum (heft's VocabParallelEmbedding)."""

    def __init__(self, full, group, shared=None, what=""):
        super().__init__(group, {"weight": (0, 1)})
        self.rows = full.num_embeddings // group.size
        self.first, self.embedding_dim = group.rank * self.rows, full.embedding_dim
        self._params(full, what, {} if shared is None else shared)

    def forward(self, ids):
        local = ids - self.first
        mine = (local >= 0) & (local < self.rows)
        out = F.embedding(local.clamp(0, self.rows - 1), self.weight)
        return _T.reduce_from_region(out * mine.unsqueeze(-1).to(out.dtype), self.group)

    def extra_repr(self):
        return (f"rows [{self.first}, {self.first + self.rows}) of {self.rows * self.group.size}"
                f", embedding_dim={self.embedding_dim}")


def _cut(style, m, parts):
    """How each parameter of full module m is cut: {name: (dim, parts)}."""
    if style == "rowwise":
        return {"weight": (1, 1), "bias": (-1, 1)}
    if style == "heads":  # (out_proj's are under out_proj: not tied elsewhere)
        return {"in_proj_weight": (0, 3), "in_proj_bias": (0, 3)}
    if isinstance(m, nn.Embedding):
        return {"weight": (0, 1)}
    return {"weight": (0, parts), "bias": (0, parts)}


def _check_ties(module, layers):
    """A parameter shared between modules must be cut alike in each (a tied embedding and
    head, both 'vocab' or the head 'colwise'); one left whole in one of them is refused."""
    modules = dict(module.named_modules(remove_duplicate=False))
    cut = {}
    for name, pattern, style, parts, gather in layers:
        for p, split in _cut(style, modules[name], parts).items():
            t = getattr(modules[name], p)
            if t is not None:
                cut.setdefault(id(t), []).append((name, pattern, split))
    planned = {id(modules[name]) for name, *_ in layers}
    for name, m in modules.items():
        for p, t in m.named_parameters(recurse=False):
            users = cut.get(id(t))
            if not users:
                continue
            first = users[0]
            if id(m) not in planned:
                raise ValueError(f"tensor_parallel: plan pattern {first[1]!r}: {first[0]!r}'s "
                                 f"parameter is tied to {name + '.' + p!r}, which the plan leaves "
                                 "whole; plan that module alike (e.g. both 'vocab')")
            for other in users[1:]:
                if other[2] != first[2]:
                    raise ValueError(f"tensor_parallel: plan patterns {first[1]!r} and "
                                     f"{other[1]!r}: {first[0]!r} and {other[0]!r} share a "
                                     "parameter but the plan cuts it in different ways")


def _replace(module, old, new):
    for m in module.modules():
        for key, child in m._modules.items():
            if child is old:
                m._modules[key] = new


def tensor_parallel(module, plan, mesh):
    """Splits `module`'s nn.Linear and nn.Embedding layers named by `plan` over the mesh's
    tensor group, in place, and returns it. Each is replaced by a heft parallel layer holding
    only its slice of the full layer's weights (so the model at any T starts from the T = 1
    model: build it with the same seed on every rank), whose forward and backward
    collectives are heft's C++ ones. Every rank of the tensor group calls it with the same
    plan and then runs the model on the same inputs. Make the optimizer afterwards (the
    parameters are new). A plan that cannot be honoured raises ValueError naming the pattern
    before anything changes. See the module docstring and docs/parallel.md."""
    group = _group(mesh, "tensor_parallel")
    if not isinstance(module, nn.Module):
        raise TypeError(f"tensor_parallel: module must be a torch.nn.Module, got "
                        f"{type(module).__name__}")
    layers, heads = plan_layers(module, plan, group.size)
    _check_ties(module, layers)
    modules, shared = dict(module.named_modules()), {}
    for name, pattern, style, parts, gather in layers:
        full, what = modules[name], f"tensor_parallel: plan pattern {pattern!r}: {name!r}"
        if isinstance(full, nn.Embedding):
            new = VocabEmbedding(full, group, shared, what)
        elif style == "rowwise":
            new = RowwiseLinear(full, group, shared, what)
        elif style == "heads":
            from ._heads_attention import HeadsAttention
            new = HeadsAttention(full, group, shared, what)
        else:
            new = ColwiseLinear(full, group, parts, gather, shared, what)
        _replace(module, full, new)
    for (owner, attr), (_, count) in heads.items():
        setattr(modules[owner], attr, count)
    return module


def vocab_parallel_cross_entropy(logits, target, mesh):
    """The mean cross-entropy over positions (F.cross_entropy's default) of logits split over
    the vocabulary: logits (..., V/T), this rank's vocabulary columns (a 'vocab' head's
    output), target (...) int64 in [0, V). heft's C++ vocab-parallel cross-entropy: two
    all-reduces of (positions) numbers, the logits never gathered. The same on every rank."""
    group = _group(mesh, "vocab_parallel_cross_entropy")
    if logits.dim() < 1 or logits.shape[:-1] != target.shape:
        raise ValueError(f"vocab_parallel_cross_entropy: logits {tuple(logits.shape)} and target "
                         f"{tuple(target.shape)}: expected logits (..., V/T) and target (...)")
    flat, ids = logits.reshape(-1, logits.shape[-1]), target.reshape(-1).long()
    first = group.rank * logits.shape[-1]
    return _T.vocab_parallel_cross_entropy_sum(flat, ids, first, group) / max(1, ids.numel())


def full_state_dict(module, rank0_only=False):
    """module.state_dict() with every parallel layer's slices joined into the full tensors
    (C++ join_slices after an all-gather over its tensor group): the keys and shapes of the
    model before tensor_parallel, so it loads into that model in one process. Collective
    over the tensor groups: every rank calls it. rank0_only: None on the ranks whose tensor
    coordinate is not 0 (they still take part)."""
    state, first = module.state_dict(), True
    for name, m in module.named_modules():
        if not isinstance(m, TensorParallelLayer):
            continue
        first = first and m.group.rank == 0
        for p, (dim, parts) in m.splits.items():
            key = f"{name}.{p}" if name else p
            if key in state:
                state[key] = _T.gather_full(state[key], dim, parts, m.group)
    return None if rank0_only and not first else state
