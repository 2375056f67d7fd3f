"""Pipeline x tensor (heft.torch.parallel.Pipeline's tensor_plan): each stage's chunks are
split by heft.torch.parallel.tensor_parallel over the mesh's tensor group, and the
activations between stages travel in the tensor layout: a stage sends only its tensor rank's
1/T of the last dimension (the other tensor ranks of the stage hold the same activation and
send the other parts, each over its own pipeline group), and the next stage all-gathers
them. Backward mirrors it: the received gradient slice is all-gathered on the sending side.
The collectives are heft's C++ regions (_c10d.parallel.tensor); see docs/pipeline.md."""
from collections import OrderedDict

import torch

from heft.torch import _c10d
from ..tensor import tensor_parallel
from ..tensor._plan import module_names, names_matching, plan_layers

_T = _c10d.parallel.tensor


def chunk_module(layers, a, b):
    """Layers [a, b) as an nn.Sequential whose children keep their index in the whole
    sequence ("3", "4", ...), so a plan's and a checkpoint's names are the model's."""
    return torch.nn.Sequential(OrderedDict((str(i), layers[i]) for i in range(a, b)))


def check_plan(layers, plan, mesh, bounds):
    """Validates tensor_plan against the whole model and every chunk (on every rank, before
    anything is freed or split, so every rank raises the same error); returns the plan or
    None. Names: the layer's index in the sequence, then its own (e.g. "1.attn.qkv")."""
    t = mesh.size("tensor")
    if plan is None:
        if t > 1:
            raise ValueError(f"Pipeline: the mesh has tensor={t} but no tensor_plan was given: "
                             "pass tensor_plan={pattern: 'colwise'|'rowwise'|'vocab'} (the names "
                             "are each layer's index in the sequence, then its own: "
                             "'*.attn.qkv')")
        return None
    if not isinstance(plan, dict) or not plan:
        raise TypeError(f"Pipeline: tensor_plan={plan!r}: expected a non-empty dict of module-"
                        "name patterns to 'colwise', 'rowwise' or 'vocab'")
    whole = torch.nn.Sequential(*layers)
    names = module_names(whole)
    for pattern in plan:
        if not isinstance(pattern, str) or not names_matching(names, pattern):
            raise ValueError(f"Pipeline: tensor_plan pattern {pattern!r} matches no module of "
                             "the model (names are the layer's index in the sequence, then its "
                             f"own: {names[1:4]})")
    for k, (a, b) in enumerate(bounds):
        module = chunk_module(layers, a, b)
        sub = sub_plan(module, plan)
        if sub:
            try:
                plan_layers(module, sub, t)  # tensor_parallel's checks, changing nothing
            except ValueError as e:
                raise ValueError(f"Pipeline: tensor_plan in chunk {k} (layers {a}..{b - 1}): "
                                 f"{e}") from e
    return plan


def sub_plan(module, plan):
    """The plan's patterns that name a module of this chunk."""
    names = module_names(module)
    return {p: s for p, s in plan.items() if names_matching(names, p)}


def split_chunk(module, plan, mesh, layers):
    """tensor_parallel on one chunk with its part of the plan; a whole layer replaced (a
    planned top-level nn.Linear) has its full parameters freed in the user's model too."""
    sub = sub_plan(module, plan)
    if not sub:
        return module
    before = dict(module._modules)
    tensor_parallel(module, sub, mesh)
    for key, old in before.items():
        if module._modules[key] is not old:
            with torch.no_grad():
                for t in list(old.parameters()) + list(old.buffers()):
                    t.data = torch.empty(0, dtype=t.dtype)
    return module


class _ScatterToRegion(torch.autograd.Function):
    """Replicated -> this tensor rank's 1/T of the last dimension forward; the slices'
    gradients all-gathered backward (heft's gather_from_region). Megatron's scatter."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        n = x.shape[-1] // group.size
        return x[..., group.rank * n:(group.rank + 1) * n].contiguous()

    @staticmethod
    def backward(ctx, grad):
        return _T.gather_from_region(grad.contiguous(), ctx.group), None


def scatter(x, group):
    return _ScatterToRegion.apply(x, group)


def gather(x, group):
    """The slices of the tensor group back to the replicated activation (backward: this
    rank's slice of the gradient)."""
    return _T.gather_from_region(x.contiguous(), group)


def splits(y, t):
    """Whether an activation y goes between stages in the tensor layout (1/T per rank)."""
    return t > 1 and y.dim() >= 1 and y.shape[-1] % t == 0
