#!/usr/bin/env python3
"""The byte-level GPT of examples/gpt_sharded.py in plain PyTorch, trained on the Debian
`fortunes` text with tensor and pipeline parallelism from heft.torch.parallel: each layer
split over --tensor ranks (Megatron's plan, heft's C++ tensor layers), the layers cut into
--pipeline stages (heft's C++ schedules and partitioner), the rest of the world replicating
it (data, torch's DDP). The heft lines are marked `# heft`.

    build/heft run -n 4 -- .venv/bin/python -u examples/gpt_3d.py    # tensor 2 x pipeline 2
    build/heft train examples/gpt-3d-python.yaml                     # the same script as a job
    build/heft run -n 1 -- ... examples/gpt_3d.py --tensor 1 --pipeline 1  # one process

The model is written as a sequence (token + position embeddings, blocks, final norm + head:
a pipeline cuts a sequence), its head untied from the embedding (a weight tied across
stages is refused), and its attention reads its widths from the projection and its head
count (so it runs with heads / T heads per rank). Rank 0 prints the plan and the schedule
(its bubble beside the theory), then `step=N loss=L tokens_per_s=T step_s=S` every log_every
steps and, on every rank, `final: rank=R step=N loss=L tokens_per_s=T mesh=...`. With
--checkpoint_dir the model and AdamW state are saved at the end (Pipeline.save_checkpoint:
heft's checkpoint directory with the layout) and a later run resumes from it, at any
tensor / pipeline degree. Hyperparameters come as `--name value` (what heft train passes).
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import heft.torch  # noqa: F401  # heft: registers the torch.distributed backend "heft"
from heft.torch.parallel import DeviceMesh, Pipeline  # heft
from gpt_sharded import Block, batch, load_text  # the same blocks, text and batches

VOCAB = 256


class Embeddings(nn.Module):  # token ids (batch, time) -> (batch, time, d)
    def __init__(self, d, block):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, d), nn.Embedding(block, d)

    def forward(self, idx):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1]))


class Head(nn.Module):  # (batch, time, d) -> logits (batch, time, VOCAB)
    def __init__(self, d):
        super().__init__()
        self.ln, self.out = nn.LayerNorm(d), nn.Linear(d, VOCAB, bias=False)

    def forward(self, x):
        return self.out(self.ln(x))


def gpt(n_layer, n_head, d, block):
    model = nn.Sequential(Embeddings(d, block), *[Block(d, n_head) for _ in range(n_layer)],
                          Head(d))
    for name, p in model.named_parameters():
        if name.endswith("weight") and p.dim() == 2:
            nn.init.normal_(p, std=0.02)
    return model


# heft: Megatron's plan, by the layer's index in the sequence and its own names: the token
# embedding split by vocabulary, attention and MLP as colwise/rowwise pairs, the head
# colwise with its logits gathered for the plain cross-entropy.
PLAN = {"0.tok": "vocab", "*.attn.qkv": "colwise", "*.attn.proj": "rowwise",
        "*.mlp.0": "colwise", "*.mlp.2": "rowwise", "*.out": "colwise"}


def loss_fn(logits, target):  # a mean over the micro-batch
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), target.reshape(-1))


def arguments():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", "--max_steps", type=int, default=200)
    ap.add_argument("--batch_size", type=int, default=16, help="global sequences per step")
    ap.add_argument("--block_size", type=int, default=128)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--log_every", type=int, default=20)
    ap.add_argument("--tensor", type=int, default=2)
    ap.add_argument("--pipeline", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--schedule", choices=["simple", "interleaved"], default="interleaved")
    ap.add_argument("--virtual_stages", type=int, default=1)
    ap.add_argument("--partition", default="auto", help="auto, or boundaries: 3 or 2,4,6")
    ap.add_argument("--checkpoint_dir", default=os.environ.get("SM_CHECKPOINT_DIR", ""))
    ap.add_argument("--data", default=os.environ.get("SM_CHANNEL_TRAIN",
                                                     "/usr/share/games/fortunes"))
    return ap.parse_args()


def main():
    a = arguments()
    dist.init_process_group("heft", init_method="env://")
    rank = dist.get_rank()
    mesh = DeviceMesh(pipeline=a.pipeline, tensor=a.tensor)  # heft: data = the rest
    data, d = mesh.size("data"), mesh.coordinate("data")
    if a.batch_size % (data * a.microbatches):
        raise SystemExit(f"gpt_3d: --batch_size {a.batch_size} must divide by data {data} x "
                         f"--microbatches {a.microbatches}")
    per = a.batch_size // data
    text = load_text(a.data)
    torch.manual_seed(0)  # every rank builds the same model; each keeps its stage's slices
    model = gpt(a.n_layer, a.n_head, a.n_embd, a.block_size)
    partition = a.partition if a.partition == "auto" else \
        [int(b) for b in a.partition.split(",") if b]
    pipe = Pipeline(model, mesh, microbatches=a.microbatches, schedule=a.schedule,  # heft
                    virtual_stages=a.virtual_stages, partition=partition,
                    example_input=batch(text, 0, a.batch_size, a.block_size, 0,
                                        per // a.microbatches)[0],
                    tensor_plan=PLAN if a.tensor > 1 else None)
    if rank == 0:
        pipe.print_schedule()
    opt = torch.optim.AdamW(pipe.parameters(), lr=a.lr, weight_decay=0.1)
    start = 0
    if a.checkpoint_dir and os.path.isdir(a.checkpoint_dir) and os.listdir(a.checkpoint_dir):
        start, _ = pipe.load_checkpoint(a.checkpoint_dir, opt)  # heft: any degrees
    t0, tokens, loss = None, 0, float("nan")
    for step in range(start, a.steps):
        if step == start + 2:
            t0, tokens = time.perf_counter(), 0
        step_start = time.perf_counter()
        x, y = batch(text, step, a.batch_size, a.block_size, d * per, (d + 1) * per)
        opt.zero_grad(set_to_none=True)
        loss = pipe.step(x, y, loss_fn)  # heft: the whole batch's loss, on every rank
        opt.step()
        tokens += a.batch_size * a.block_size
        if rank == 0 and (step + 1) % a.log_every == 0:
            rate = tokens / (time.perf_counter() - t0) if t0 else 0.0
            print(f"step={step + 1} loss={loss:.4f} tokens_per_s={rate:.0f} "
                  f"step_s={time.perf_counter() - step_start:.2f}", flush=True)
    if a.checkpoint_dir:
        pipe.save_checkpoint(a.checkpoint_dir, opt, step=a.steps)  # heft
    rate = tokens / (time.perf_counter() - t0) if t0 else 0.0
    print(f"final: rank={rank} step={a.steps} loss={loss:.6f} tokens_per_s={rate:.0f} "
          f"mesh=tensor{a.tensor}xpipeline{a.pipeline}xdata{data}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
