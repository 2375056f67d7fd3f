"""heft's tensor-parallel layers (tensor_parallel swaps them in, __init__.py; the "heads"
attention is _heads_attention.py): each holds this rank's slice of a full nn.Linear or
nn.Embedding, cut by heft's C++ take_slice, and computes through the C++ regions
(_c10d.parallel.tensor: copy_to / reduce_from / gather_from, autograd functions whose
collectives are C++). Nothing here reads a plan or walks a model."""
import torch.nn as nn
import torch.nn.functional as F

from heft.torch import _c10d

_T = _c10d.parallel.tensor


def slice_parameter(full, dim, parts, group, what):
    """This rank's slice of the full parameter as a new Parameter (C++ take_slice: along dim,
    in `parts` equal blocks each split over the ranks; dim -1 whole); `what` names it in
    take_slice's errors."""
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
                setattr(self, name, slice_parameter(p, dim, parts, self.group, what))
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
