"""tensor_parallel's "heads" style: torch's nn.MultiheadAttention (torchvision's
VisionTransformer, nn.TransformerEncoderLayer) split by heads over the tensor group, on
heft's C++ regions (_c10d.parallel.tensor), Megatron's attention layout:

  in_proj   the fused q/k/v weight (3E, E) cut as 3 parts by rows: each rank keeps the q, k
            and v rows of its heads [r·H/T, (r+1)·H/T) (colwise; its input copied into the
            region: one backward all-reduce)
  attention over those heads only
  out_proj  cut by input features, the same heads' columns (rowwise: one forward all-reduce,
            the bias added once after the sum)

nn.MultiheadAttention computes with in_proj_weight and out_proj.weight itself
(F.multi_head_attention_forward), never calling out_proj, so its nn.Linear out_proj cannot be
planned alone: the module is planned whole ("encoder.layers.*.self_attention": "heads")."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from heft.torch import _c10d
from ._layers import TensorParallelLayer, slice_parameter

_T = _c10d.parallel.tensor


def check(module, what):
    """ValueError naming `what` for an nn.MultiheadAttention the split does not cover."""
    unsupported = [n for n, bad in (
        ("kdim/vdim other than embed_dim", not module._qkv_same_embed_dim),
        ("add_bias_kv", module.bias_k is not None),
        ("add_zero_attn", module.add_zero_attn)) if bad]
    if unsupported:
        raise ValueError(f"{what}: nn.MultiheadAttention with {', '.join(unsupported)}, which "
                         "'heads' does not support")


class HeadsAttention(TensorParallelLayer):
    """nn.MultiheadAttention holding num_heads / T of its heads (see the module docstring).
    Takes and returns what nn.MultiheadAttention does; need_weights gives the weights of all
    heads (averaged: one all-reduce; per head: one all-gather)."""

    _heft_leaf = True  # reads out_proj's parameters without calling it: ShardedDataParallel
    # makes no unit of out_proj (sharded/_units.py)

    def __init__(self, full, group, shared, what):
        check(full, what)
        super().__init__(group, {"in_proj_weight": (0, 3), "in_proj_bias": (0, 3),
                                 "out_proj.weight": (1, 1), "out_proj.bias": (-1, 1)})
        self.embed_dim, self.head_dim = full.embed_dim, full.head_dim
        self.all_heads = full.num_heads
        self.num_heads = _T.split_size(full.num_heads, group.size, f"{what} num_heads")
        self.batch_first, self.dropout = full.batch_first, full.dropout
        self.out_proj = nn.Module()

        def cut(owner, attr, source, dim, parts):
            p = getattr(source, attr)
            if p is None:
                owner.register_parameter(attr, None)
                return
            if id(p) not in shared:
                shared[id(p)] = slice_parameter(p, dim, parts, group, what)
            setattr(owner, attr, shared[id(p)])

        cut(self, "in_proj_weight", full, 0, 3)
        cut(self, "in_proj_bias", full, 0, 3)
        cut(self.out_proj, "weight", full.out_proj, 1, 1)
        cut(self.out_proj, "bias", full.out_proj, -1, 1)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True):
        if not self.batch_first:  # (keeping self-attention's one input one tensor)
            same_key, same_value = key is query, value is key
            query = query.transpose(0, 1)
            key = query if same_key else key.transpose(0, 1)
            value = key if same_value else value.transpose(0, 1)
        n, length, source = query.shape[0], query.shape[1], key.shape[1]
        inputs = [_T.copy_to_region(query, self.group)]
        for t, before in ((key, query), (value, key)):
            inputs.append(inputs[-1] if t is before else _T.copy_to_region(t, self.group))
        weights = self.in_proj_weight.chunk(3)
        biases = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
        q, k, v = (F.linear(x, w, b).view(n, -1, self.num_heads, self.head_dim).transpose(1, 2)
                   for x, w, b in zip(inputs, weights, biases))
        scores = (q / math.sqrt(self.head_dim)) @ k.transpose(-2, -1)  # (n, h, L, S)
        scores = self._masked(scores, attn_mask, key_padding_mask, n, length, source)
        attn = scores.softmax(-1)
        if self.dropout > 0.0 and self.training:
            attn = F.dropout(attn, p=self.dropout)
        out = (attn @ v).transpose(1, 2).reshape(n, length, self.num_heads * self.head_dim)
        out = _T.reduce_from_region(F.linear(out, self.out_proj.weight), self.group)
        if self.out_proj.bias is not None:
            out = out + self.out_proj.bias
        if not self.batch_first:
            out = out.transpose(0, 1)
        return out, (self._all_weights(attn, average_attn_weights) if need_weights else None)

    def _masked(self, scores, attn_mask, key_padding_mask, n, length, source):
        if attn_mask is not None:
            if attn_mask.dim() == 3:  # (n·H, L, S): this rank's heads
                first = self.group.rank * self.num_heads
                attn_mask = attn_mask.view(n, self.all_heads, length, source)[
                    :, first:first + self.num_heads]
            scores = _add_mask(scores, attn_mask)
        if key_padding_mask is not None:
            scores = _add_mask(scores, key_padding_mask.view(n, 1, 1, source))
        return scores

    def _all_weights(self, attn, average):
        if average:
            return _T.reduce_from_region(attn.sum(1), self.group) / self.all_heads
        heads_last = _T.gather_from_region(attn.permute(0, 2, 3, 1).contiguous(), self.group)
        return heads_last.permute(0, 3, 1, 2)

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, heads={self.num_heads} (of {self.all_heads}), "
                f"batch_first={self.batch_first}, rank={self.group.rank}/{self.group.size}")


def _add_mask(scores, mask):
    if mask.dtype == torch.bool:
        return scores.masked_fill(mask, float("-inf"))
    return scores + mask
