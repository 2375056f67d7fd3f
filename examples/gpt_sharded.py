#!/usr/bin/env python3
"""A byte-level GPT written in plain PyTorch (no heft-train code), trained on the Debian
`fortunes` text with heft.torch.parallel.ShardedDataParallel: parameters, gradients and
AdamW state sharded over the ranks (ZeRO-3). The heft lines are marked `# heft`.

    build/heft run -n 4 -- .venv/bin/python -u examples/gpt_sharded.py
    build/heft train examples/gpt-sharded-python.yaml          # the same script as a job
    ... examples/gpt_sharded.py --strategy ddp                 # torch's DDP, to compare
    ... examples/gpt_sharded.py --strategy fsdp2               # torch's FSDP2 on Gloo, likewise
    ... examples/gpt_sharded.py --strategy fsdp2 --backend heft  # the same FSDP2 script on heft

Each rank takes its share of every global batch (random windows of the text, the same on
every rank for a step), prints `step=N loss=L tokens_per_s=T step_s=S` every log_every
steps (S: that step's seconds) and a summary line `final: step=N loss=L tokens_per_s=T
state_bytes=B peak_rss_mb=M strategy=S` (tokens of all ranks per second after the first 2
steps; state_bytes: this rank's parameters + gradients + optimizer state). `--strategy
fsdp2` is torch's own peer, on its Gloo backend by default (no heft in the step) or with
`--backend heft` on heft's collectives (the same script, one name changed): `fully_shard` on
each block, then on the root, after building the whole model on every rank (the GPT initializes
in its constructor, so torch's meta-device path would draw other numbers); the sharded-only
flags (--sharded_degree, --mixed_precision, --activation_checkpointing, --units,
--checkpoint_dir) do not apply to it. Hyperparameters
come as `--name value` (what heft train passes); see --help. Before building the model,
rank 0 prints `parameters=N` and every rank runs heft's memory pre-flight on a meta copy:
when the ranks on this machine cannot hold the training state (DDP of a model too large
for them), each exits 1 with the MemoryError, allocating nothing.
"""
import argparse
import math
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import heft.torch  # noqa: F401  # heft: registers the torch.distributed backend "heft"
from heft.torch import parallel, profile  # heft


def load_text(root):
    names = sorted(n for n in os.listdir(root) if not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(root, n)))
    if not names:
        raise SystemExit(f"gpt_sharded: --data {root}: no text files")
    raw = b"".join(open(os.path.join(root, n), "rb").read() for n in names)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


class Attention(nn.Module):
    def __init__(self, d, heads, qkv_bias=True):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=qkv_bias), nn.Linear(d, d)

    def forward(self, x):
        b, t, _ = x.shape  # widths from the projection: heads / T heads per tensor rank
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(x).chunk(3, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, -1))


class Block(nn.Module):  # (batch, time, d) -> (batch, time, d)
    def __init__(self, d, heads, qkv_bias=True):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads, qkv_bias)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, d, block, vocab=256, qkv_bias=True):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, n_head, qkv_bias) for _ in range(n_layer))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def batch(text, step, rows, block, lo, hi):
    g = torch.Generator().manual_seed(1000 + step)
    starts = torch.randint(0, text.numel() - block - 1, (rows,), generator=g)[lo:hi]
    idx = torch.stack([text[s:s + block + 1] for s in starts.tolist()])
    return idx[:, :-1], idx[:, 1:]


def state_bytes(model, opt):
    def size(t):  # this rank's bytes: an FSDP2 DTensor counts its local shard
        t = t.to_local() if isinstance(t, DTensor) else t
        return t.numel() * t.element_size()
    n = sum(size(p) for p in model.parameters())
    n += sum(size(p.grad) for p in model.parameters() if p.grad is not None)
    return n + sum(size(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", "--max_steps", type=int, default=200)
    ap.add_argument("--batch_size", type=int, default=16, help="global sequences per step")
    ap.add_argument("--block_size", type=int, default=128)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256,
                    help="embedding rows, tied to the head (the data are bytes: ids below 256)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--log_every", type=int, default=20)
    ap.add_argument("--strategy", choices=["sharded", "ddp", "fsdp2"], default="sharded",
                    help="fsdp2: torch's fully_shard (on --backend), to compare")
    ap.add_argument("--backend", choices=["gloo", "heft"], default=None,
                    help="the process group's backend (default: heft, gloo for --strategy fsdp2); "
                         "fsdp2 on heft is torch's FSDP2 with heft's collectives")
    ap.add_argument("--sharded_degree", type=int, default=0, help="0: every rank")
    ap.add_argument("--mixed_precision", default="none", choices=["none", "bf16"])
    ap.add_argument("--activation_checkpointing", type=int, default=0)
    ap.add_argument("--deferred_init", type=int, default=1)
    ap.add_argument("--torch_profile", type=int, default=0,
                    help="N > 0: torch's profiler over N steps after the warm-up; rank 0 prints "
                         "its table of operators by self CPU time")
    ap.add_argument("--units", choices=["block", "linear"], default="block",
                    help="sharding units: each block, or each Linear (less gathered at once)")
    ap.add_argument("--checkpoint_dir", default=os.environ.get("SM_CHECKPOINT_DIR", ""))
    ap.add_argument("--data", default=os.environ.get("SM_CHANNEL_TRAIN", "/usr/share/games/fortunes"))
    a = ap.parse_args()
    backend = a.backend or ("gloo" if a.strategy == "fsdp2" else "heft")
    if backend != "heft" and a.strategy != "fsdp2":
        raise SystemExit(f"gpt_sharded: --backend {backend}: --strategy {a.strategy} runs on heft only")
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.batch_size % world:
        raise SystemExit(f"gpt_sharded: --batch_size {a.batch_size} must divide by {world} ranks")
    text = load_text(a.data)
    degree = {"ddp": 1, "fsdp2": world}.get(a.strategy, a.sharded_degree or world)
    with parallel.deferred_init():  # heft: sized on meta tensors, nothing allocated
        sizing = GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab)
    if rank == 0:
        print(f"parameters={parallel.parameter_count(sizing)}", flush=True)
    try:  # heft: refuse what the ranks on this machine cannot hold, before allocating it
        parallel.require_memory(sizing, "adamw", degree, what=f"gpt_sharded --strategy {a.strategy}")
    except MemoryError as e:  # every rank decided alike: each says so, then all exit 1
        print(f"MemoryError: {e}", file=sys.stderr, flush=True)
        dist.barrier()
        dist.destroy_process_group()
        raise SystemExit(1)
    torch.manual_seed(0)
    if a.strategy == "ddp":
        model = parallel.DistributedDataParallel(GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab))
    elif a.strategy == "fsdp2":
        model = GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab)
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)  # the root: embeddings, tied head, final LayerNorm
    else:
        with parallel.deferred_init() if a.deferred_init else torch.no_grad():  # heft
            gpt = GPT(a.n_layer, a.n_head, a.n_embd, a.block_size, a.vocab)
        model = parallel.ShardedDataParallel(  # heft
            gpt, units=[Block] if a.units == "block" else [nn.Linear], sharded_degree=a.sharded_degree or None,
            mixed_precision=None if a.mixed_precision == "none" else a.mixed_precision,
            activation_checkpointing=bool(a.activation_checkpointing))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    start = 0
    if a.checkpoint_dir and a.strategy == "sharded" and os.path.isdir(a.checkpoint_dir) and \
            os.listdir(a.checkpoint_dir):
        start, _ = parallel.load_checkpoint(a.checkpoint_dir, model, opt)  # heft
    per = a.batch_size // world
    # heft: step phases for `heft train`'s profile (no-op without HEFT_PROFILE_DIR); the
    # sharded model reports its waits for collectives as "communication" inside them.
    profiler = profile.StepProfiler.from_env().activate()
    t0, tokens, loss_value = None, 0, float("nan")
    tprof = None
    for step in range(start, a.steps):
        if step == start + 2:
            t0, tokens = time.perf_counter(), 0
            if a.torch_profile > 0:
                tprof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                tprof.__enter__()
        if tprof is not None and step == start + 2 + a.torch_profile:
            tprof.__exit__(None, None, None)
            if rank == 0:
                print(tprof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), flush=True)
            tprof = None
        step_start = time.perf_counter()
        profiler.begin_step(step)
        with profiler.phase("data"):
            x, y = batch(text, step, a.batch_size, a.block_size, rank * per, (rank + 1) * per)
        with profiler.phase("forward"):
            loss = F.cross_entropy(model(x).float().reshape(-1, a.vocab), y.reshape(-1))
        with profiler.phase("backward"):
            opt.zero_grad(set_to_none=True)
            loss.backward()
        with profiler.phase("optimizer"):
            if a.strategy == "sharded":
                model.clip_grad_norm_(1.0)  # heft: the global norm over every rank's shard
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        profiler.end_step()
        tokens += a.batch_size * a.block_size
        t = loss.detach().reshape(1).clone()
        dist.all_reduce(t)
        loss_value = t.item() / world
        if rank == 0 and (step + 1) % a.log_every == 0:
            rate = tokens / (time.perf_counter() - t0) if t0 else 0.0
            print(f"step={step + 1} loss={loss_value:.4f} tokens_per_s={rate:.0f} "
                  f"step_s={time.perf_counter() - step_start:.2f}", flush=True)
    if a.checkpoint_dir and a.strategy == "sharded":
        parallel.save_checkpoint(a.checkpoint_dir, model, opt, step=a.steps)  # heft
    rate = tokens / (time.perf_counter() - t0) if t0 else 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"final: rank={rank} step={a.steps} loss={loss_value:.9g} tokens_per_s={rate:.0f} "
          f"state_bytes={state_bytes(model, opt)} peak_rss_mb={rss:.0f} strategy={a.strategy} "
          f"backend={backend}",
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
