"""Small models for the ShardedDataParallel tests (tests/python/sharded_*_test.py): a CNN,
a GPT, and a model with a tied embedding/head and buffers; each with a batch maker whose
samples depend only on (seed, step, index), so any rank can cut its part of a global batch."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, CTX = 61, 12


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 3, padding=1)
        self.conv2 = nn.Conv2d(6, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.fc1 = nn.Linear(8 * 3 * 3, 24)
        self.fc2 = nn.Linear(24, 5)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.norm(self.conv2(x))), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        # No bias on q, k, v: a key bias has a gradient of exactly zero (softmax ignores it),
        # so under Adam it follows rounding noise and no two summation orders agree.
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A plain GPT: token and position embeddings, blocks, a final norm and an untied head."""

    def __init__(self, d=32, layers=2, heads=2, tied=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, d), nn.Embedding(CTX, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, VOCAB, bias=False)
        if tied:
            self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class Tied(nn.Module):
    """Embedding and head share one weight; a persistent buffer scales the hidden state and
    a non-persistent one holds position ids."""

    def __init__(self, d=24):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.Tanh(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, VOCAB, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.linspace(0.5, 1.5, d))
        self.register_buffer("positions", torch.arange(CTX), persistent=False)

    def forward(self, idx):
        x = self.emb(idx) + 0.01 * self.positions[: idx.shape[1], None].float()
        return self.head(self.mlp(x) * self.scale)


def make(name, seed=1):
    torch.manual_seed(seed)
    return {"cnn": CNN, "gpt": GPT, "tied": Tied}[name]()


def batch(name, step, lo, hi, seed=7):
    """Samples lo..hi-1 of step `step`'s global batch: (input, target)."""
    xs, ys = [], []
    for i in range(lo, hi):
        g = torch.Generator().manual_seed(seed * 1000003 + step * 1009 + i)
        if name == "cnn":
            xs.append(torch.randn(1, 1, 12, 12, generator=g))
            ys.append(torch.randint(0, 5, (1,), generator=g))
        else:
            t = torch.randint(0, VOCAB, (1, CTX + 1), generator=g)
            xs.append(t[:, :-1])
            ys.append(t[:, 1:])
    return torch.cat(xs), torch.cat(ys)


def loss_of(name, out, y):
    if name == "cnn":
        return F.cross_entropy(out.float(), y)
    return F.cross_entropy(out.float().reshape(-1, VOCAB), y.reshape(-1))
