"""heft.torch.parallel.tensor_parallel: tensor parallelism by plan for your own PyTorch model,
on heft's C++ tensor layers (src/heft/parallel/tensor/tensor_parallel.h) through
_c10d.parallel.tensor: the regions (copy_to / reduce_from / gather_from, autograd functions
whose collectives are C++), take_slice / join_slices and the vocab-parallel cross-entropy.
This file only swaps modules: _plan.py reads the plan (plan_layers), _layers.py and
_heads_attention.py hold the layers swapped in. See docs/parallel.md, "Tensor parallelism by
plan".

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

import torch.nn as nn

from heft.torch import _c10d
from ..deferred import find, materialize_held
from ..mesh import DeviceMesh
from ._heads_attention import HeadsAttention
from ._layers import (ColwiseLinear, RowwiseLinear, TensorParallelLayer, VocabEmbedding,
                      slice_parameter)
from ._plan import plan_layers

_T = _c10d.parallel.tensor
_groups = weakref.WeakKeyDictionary()  # DeviceMesh -> its tensor group as a C++ Group


def _group(mesh, who):
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{who}: mesh must be a heft.torch.parallel.DeviceMesh, got "
                        f"{type(mesh).__name__}")
    if mesh not in _groups:
        _groups[mesh] = _c10d.parallel.Group(mesh.group("tensor"))
    return _groups[mesh]


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


def _materialize_slices(record, module, layers, group, shared):
    """A model built under deferred_init: the constructor replayed (one process's values for
    the same seed), each planned parameter kept as this rank's slice only (put in `shared`,
    where the parallel layers take it from), every other parameter whole (replicated, as
    without the plan); returns the replay's peak bytes."""
    modules, cuts = dict(module.named_modules()), {}
    for name, pattern, style, parts, gather in layers:
        m = modules[name]
        table = dict(_cut(style, m, parts))
        if style == "heads":  # HeadsAttention cuts out_proj rowwise too
            table.update({"out_proj.weight": (1, 1), "out_proj.bias": (-1, 1)})
        for attr, (dim, n) in table.items():
            t = _parameter(m, attr)
            if t is not None:
                cuts.setdefault(id(t), (dim, n, f"tensor_parallel: plan pattern {pattern!r}: "
                                                 f"{name!r}"))

    def keep(p, full):
        if id(p) not in cuts:
            return full.clone()
        dim, n, what = cuts[id(p)]
        return slice_parameter(full, dim, n, group, what).detach()

    made, peak = materialize_held(record, module, keep)
    for pid in cuts:  # the parallel layers take these as they are: already cut
        if pid in made:
            shared[id(made[pid])] = made[pid]
    return peak


def _parameter(m, dotted):
    """m's parameter at the dotted name, or None (no such name, or a None bias)."""
    try:
        return m.get_parameter(dotted)
    except AttributeError:
        return None


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
    parameters are new). A model built under deferred_init is replayed, keeping this rank's
    slices of the planned parameters and the others whole: no rank holds the planned layers
    whole (module.deferred_peak_bytes: the replay's peak). A plan that cannot be honoured raises ValueError naming the pattern
    before anything changes. See the module docstring and docs/parallel.md."""
    group = _group(mesh, "tensor_parallel")
    if not isinstance(module, nn.Module):
        raise TypeError(f"tensor_parallel: module must be a torch.nn.Module, got "
                        f"{type(module).__name__}")
    layers, heads = plan_layers(module, plan, group.size)
    _check_ties(module, layers)
    modules, shared = dict(module.named_modules()), {}
    record = find(module)
    if record is not None:  # built under deferred_init: this rank's slices only
        module.deferred_peak_bytes = _materialize_slices(record, module, layers, group, shared)
    for name, pattern, style, parts, gather in layers:
        full, what = modules[name], f"tensor_parallel: plan pattern {pattern!r}: {name!r}"
        if isinstance(full, nn.Embedding):
            new = VocabEmbedding(full, group, shared, what)
        elif style == "rowwise":
            new = RowwiseLinear(full, group, shared, what)
        elif style == "heads":
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
