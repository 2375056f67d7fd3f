#!/usr/bin/env python3
"""A plain torch 2 FSDP2 training script (a byte-level GPT on the Debian `fortunes` text): one
`fully_shard` per block and one on the root, a MixedPrecisionPolicy, and a
torch.distributed.checkpoint (DCP) folder it resumes from. Nothing in it is heft's but the
backend's name, chosen by one flag, and, with --tsm, the model-parallel library v2's two lines
(`tsm.init`, `tsm.transform`) on heft:

    heft run -n 4 -- .venv/bin/python -u examples/fsdp2_gpt.py                   # Gloo
    heft run -n 4 -- .venv/bin/python -u examples/fsdp2_gpt.py --backend heft    # heft
    heft run -n 4 -- .venv/bin/python -u examples/fsdp2_gpt.py --backend heft --tsm 2
                                           # tensor parallel 2 x FSDP2 over the other 2

(also under torchrun: it joins with init_method env://). Prints `step=N loss=L
tokens_per_s=T` every --log_every steps and `final: step=N loss=L tokens_per_s=T` (tokens of
all ranks per second after the first 2 steps); with --checkpoint_dir it saves a DCP folder
every --checkpoint_every steps and resumes from the newest one there. docs/python.md,
"Bring your torch 2 script"."""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, d, block, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, n_head) for _ in range(n_layer))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        x = self.tok(idx) + self.pos(torch.arange(t))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def load_text(root):
    names = sorted(n for n in os.listdir(root) if not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(root, n)))
    raw = b"".join(open(os.path.join(root, n), "rb").read() for n in names)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).long()


def batch(text, step, rows, block, lo, hi):
    """Rows lo..hi of the step's global batch: random windows, the same on every rank."""
    g = torch.Generator().manual_seed(10_000 + step)
    starts = torch.randint(0, len(text) - block - 1, (rows,), generator=g)[lo:hi]
    x = torch.stack([text[s:s + block] for s in starts])
    y = torch.stack([text[s + 1:s + block + 1] for s in starts])
    return x, y


def newest(folder):
    steps = [int(n[5:]) for n in os.listdir(folder) if n.startswith("step-") and
             os.path.isfile(os.path.join(folder, n, ".metadata"))] if os.path.isdir(folder) else []
    return max(steps) if steps else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["gloo", "heft"], default="gloo")
    ap.add_argument("--tsm", type=int, default=0,
                    help="tensor_parallel_degree through heft.torch.sagemaker (0: no tsm)")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch_size", type=int, default=16, help="global sequences per step")
    ap.add_argument("--block_size", type=int, default=64)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--mixed_precision", choices=["none", "bf16"], default="none")
    ap.add_argument("--log_every", type=int, default=20)
    ap.add_argument("--checkpoint_dir", default="")
    ap.add_argument("--checkpoint_every", type=int, default=50)
    ap.add_argument("--data", default=os.environ.get("SM_CHANNEL_TRAIN",
                                                     "/usr/share/games/fortunes"))
    args = ap.parse_args()

    if args.backend == "heft":
        import heft.torch  # noqa: F401  registers the torch.distributed backend "heft"
    dist.init_process_group(args.backend)
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(0)
    model = GPT(args.n_layer, args.n_head, args.n_embd, args.block_size)
    if args.tsm:  # the library v2's two lines, on heft
        import heft.torch.sagemaker as tsm
        tsm.init({"tensor_parallel_degree": args.tsm, "random_seed": 0})
        model = tsm.transform(model)
        mesh, dp, dp_rank = tsm.state.dp_mesh, tsm.state.dp_size, tsm.state.dp_rank
    else:
        mesh, dp, dp_rank = init_device_mesh("cpu", (world,)), world, rank
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if args.mixed_precision == "bf16" else MixedPrecisionPolicy())
    for b in model.blocks:
        fully_shard(b, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)

    start = newest(args.checkpoint_dir) if args.checkpoint_dir else 0
    if start:
        msd, osd = get_state_dict(model, opt)
        state = {"model": msd, "optim": osd}
        dcp.load(state, checkpoint_id=os.path.join(args.checkpoint_dir, f"step-{start}"))
        set_state_dict(model, opt, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        if rank == 0:
            print(f"resumed: step={start}", flush=True)

    text = load_text(args.data)
    rows = args.batch_size // dp
    lo, hi = dp_rank * rows, (dp_rank + 1) * rows
    loss_value, clock, timed = float("nan"), None, 0
    for step in range(start + 1, args.steps + 1):
        if step == start + 3:
            clock, timed = time.perf_counter(), 0
        x, y = batch(text, step, args.batch_size, args.block_size, lo, hi)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
        loss.backward()
        opt.step()
        mean = loss.detach().float().reshape(1)
        dist.all_reduce(mean)
        loss_value = mean.item() / world
        timed += args.batch_size * args.block_size
        rate = timed / (time.perf_counter() - clock) if clock else 0.0
        if rank == 0 and (step % args.log_every == 0 or step == args.steps):
            print(f"step={step} loss={loss_value:.6f} tokens_per_s={rate:.0f}", flush=True)
        if args.checkpoint_dir and step % args.checkpoint_every == 0:
            msd, osd = get_state_dict(model, opt)
            dcp.save({"model": msd, "optim": osd},
                     checkpoint_id=os.path.join(args.checkpoint_dir, f"step-{step}"))
    if rank == 0:
        rate = timed / (time.perf_counter() - clock) if clock else 0.0
        print(f"final: step={args.steps} loss={loss_value:.9g} tokens_per_s={rate:.0f} "
              f"backend={args.backend} tsm={args.tsm}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
