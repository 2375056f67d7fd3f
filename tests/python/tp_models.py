"""Models for tensor_parallel_test.py, in plain PyTorch, with their tensor-parallel plans:
- GPT: examples/gpt_sharded.py's GPT, imported from the example (token and position
  embeddings, a tied head, blocks of `attn` (Attention with `heads`, a fused qkv and proj)
  and `mlp` (Sequential fc, GELU, out), a final norm), whose attention reads its widths from
  the projection's output and its head count (chunk(3), view(b, t, heads, -1),
  reshape(b, t, -1)) as tensor-parallel attention code must: after tensor_parallel a rank
  holds heads/T heads of width d/heads; here small, vocabulary 64, no q/k/v bias;
- SplitAttention: attention with separate q, k, v and o layers and `num_heads`;
- Mixer: an MLP-mixer (patches embedded, token-mixing MLPs across the patches, channel-mixing
  MLPs across the features, a class head): another shape, where one colwise/rowwise pair
  acts on the transposed activations.
Batches depend only on (step, index), so every process builds the same global batch."""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import support

if os.path.join(support.BINARY_DIR, "python") not in sys.path:  # the example imports heft
    sys.path.append(os.path.join(support.BINARY_DIR, "python"))
sys.path.insert(0, os.path.join(support.SOURCE_DIR, "examples"))
import gpt_sharded as G  # noqa: E402  (examples/gpt_sharded.py: its model, no side effects)

VOCAB, CTX, CLASSES, PATCHES, PATCH = 64, 8, 8, 8, 12


class Block(G.Block):
    """examples/gpt_sharded.py's block; no q/k/v bias by default: a key bias has a gradient
    of exactly zero (softmax ignores a constant), so under Adam it follows rounding noise and
    no two summation orders agree (qkv_bias=True only for slicing checks)."""

    def __init__(self, d, heads, qkv_bias=False):
        super().__init__(d, heads, qkv_bias)


class GPT(G.GPT):
    """examples/gpt_sharded.py's GPT, small, with the test's vocabulary and no q/k/v bias."""

    def __init__(self, n_layer=2, n_head=4, d=32, block=CTX, vocab=VOCAB, qkv_bias=False):
        super().__init__(n_layer, n_head, d, block, vocab, qkv_bias)


# Megatron's layout: the token embedding and the (tied) head split by vocabulary, the
# logits left split for vocab_parallel_cross_entropy.
GPT_PLAN = {"tok": "vocab", "blocks.*.attn.qkv": "colwise", "blocks.*.attn.proj": "rowwise",
            "blocks.*.mlp.0": "colwise", "blocks.*.mlp.2": "rowwise", "head": "vocab"}


class MixerLayer(nn.Module):
    def __init__(self, patches, d):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        # No bias on the token MLP's output: it adds a constant over each patch's features,
        # which the next LayerNorm removes (a gradient of exactly zero, as a key bias).
        self.token = nn.Sequential(nn.Linear(patches, 4 * patches), nn.GELU(),
                                   nn.Linear(4 * patches, patches, bias=False))
        self.channel = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):  # (B, patches, d)
        x = x + self.token(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel(self.ln2(x))


class Mixer(nn.Module):
    def __init__(self, layers=2, d=24):
        super().__init__()
        self.embed = nn.Linear(PATCH, d)
        self.layers = nn.Sequential(*(MixerLayer(PATCHES, d) for _ in range(layers)))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, CLASSES)

    def forward(self, x):  # (B, patches, PATCH)
        return self.head(self.ln(self.layers(self.embed(x))).mean(1))


# The head colwise with its logits gathered: the plain F.cross_entropy trains it.
MIXER_PLAN = {"layers.*.token.0": "colwise", "layers.*.token.2": "rowwise",
              "layers.*.channel.0": "colwise", "layers.*.channel.2": "rowwise",
              "head": "colwise"}


class SplitAttention(nn.Module):
    """Attention with separate q, k, v and o projections and a `num_heads` attribute."""

    def __init__(self, d=16, num_heads=4):
        super().__init__()
        self.num_heads = num_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (f(x).view(b, t, self.num_heads, -1).transpose(1, 2)
                   for f in (self.q, self.k, self.v))
        att = ((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])).softmax(-1)
        return self.o((att @ v).transpose(1, 2).reshape(b, t, -1))


SPLIT_ATTENTION_PLAN = {"[qkv]": "colwise", "o": "rowwise"}


def make(name, seed=1, **kwargs):
    torch.manual_seed(seed)
    return {"gpt": GPT, "mixer": Mixer, "split_attention": SplitAttention}[name](**kwargs)


def batch(name, step, rows=4, seed=11):
    """Step `step`'s global batch: (input, target)."""
    g = torch.Generator().manual_seed(seed * 1000003 + step)
    if name == "gpt":
        t = torch.randint(0, VOCAB, (rows, CTX + 1), generator=g)
        return t[:, :-1], t[:, 1:]
    return (torch.randn(rows, PATCHES, PATCH, generator=g),
            torch.randint(0, CLASSES, (rows,), generator=g))


def plain_loss(name, out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
