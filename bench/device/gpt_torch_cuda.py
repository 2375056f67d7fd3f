#!/usr/bin/env python3
"""PyTorch's own single-GPU training step of heft-train's GPT, the peer of `heft-train --model
gpt --device cuda --bf16 true` in bench/device/h200.sh: the model, data and optimizer of
../shared/peers/gpt_torch.py (its GPT, AdamW 0.9/0.95 with weight decay 0.1 on matrices,
grad-norm clip 1.0, linear warm-up), one process on cuda:0, bf16 autocast, eager mode (as
heft-train runs). Prints `step=N loss=L` every --log_every steps and
`final: step=N loss=L tokens_per_s=T seconds=S` (after --warmup untimed steps, synchronised).

    python3 bench/device/gpt_torch_cuda.py --peer .device/peers/gpt_torch.py --data DIR
"""
import argparse
import importlib.util
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", required=True, help="path of ../shared/peers/gpt_torch.py")
    ap.add_argument("--data", required=True, help="the fortunes text directory")
    ap.add_argument("--n_layer", type=int, default=12)
    ap.add_argument("--n_head", type=int, default=12)
    ap.add_argument("--n_embd", type=int, default=768)
    ap.add_argument("--block_size", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--warmup_lr", type=int, default=5)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--log_every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpt_torch_cuda: torch sees no GPU")
    spec = importlib.util.spec_from_file_location("gpt_torch", a.peer)
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)

    torch.manual_seed(a.seed)
    train, _ = peer.load_text(a.data)
    dev = torch.device("cuda", 0)
    with dev:  # the peer's forward makes its positions with torch.arange: on the GPU
        model = peer.GPT(a.n_layer, a.n_head, a.n_embd, a.block_size)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(a.seed)
    t0, timed = None, 0
    for step in range(1, a.steps + 1):
        if step == a.warmup + 1:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        for grp in opt.param_groups:
            grp["lr"] = a.lr * min(1.0, step / max(1, a.warmup_lr))
        x, y = peer.batch(train, a.batch, a.block_size, g)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with dev, torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, 256).float(), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if t0 is not None:
            timed += 1
        if step % a.log_every == 0:
            print(f"step={step} loss={loss.item():.4f}", flush=True)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"final: step={a.steps} loss={loss.item():.4f} "
          f"tokens_per_s={timed * a.batch * a.block_size / dt:.1f} seconds={dt:.2f}", flush=True)


if __name__ == "__main__":
    main()
