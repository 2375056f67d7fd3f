#!/usr/bin/env python3
"""An ordinary PyTorch DDP script on Fashion-MNIST, torchrun-style, whose gradients go
through heft: the only heft lines are the import and the backend name.

    build/heft run --hosts 2 -n 2 -- .venv/bin/python -u examples/pytorch_ddp.py
    build/heft train examples/pytorch-ddp.yaml          # the same script as a job
    ... examples/pytorch_ddp.py --backend gloo          # the same script on Gloo

Each worker joins through torch's env:// rendezvous (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT from heft run or heft train), trains the CNN below on its share of every global
batch, prints `step=N epoch=E loss=L samples_per_s=S` lines and, per epoch, `epoch=E
test_loss=L test_acc=A` (the test set split over the ranks, the counts summed), then one
summary line, `final: step=N test_acc=A samples_per_s=S seconds=T backend=B` (samples of all
ranks over the training loops' time, evaluation left out), and rank 0 saves the model into
SM_MODEL_DIR when it is set. Expected (docs/python.md): test_acc about 0.88 after the 2
epochs of examples/pytorch-ddp.yaml. Hyperparameters come as `--name value`
(what heft train passes): epochs, batch_size (global), lr, momentum, limit (train on the
first N samples of each epoch; 0: all), backend.
"""
import argparse
import gzip
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import heft.torch  # noqa: F401  registers the torch.distributed backend "heft"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data, split):
    x = read_idx(os.path.join(data, f"{split}-images-idx3-ubyte.gz")).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data, f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
    return torch.from_numpy((x - 0.2860) / 0.3530).unsqueeze(1), torch.from_numpy(y)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 5), nn.Conv2d(32, 64, 5)
        self.f1, self.f2 = nn.Linear(1024, 512), nn.Linear(512, 10)

    def forward(self, x):                                # (B, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.c1(x)), 2)          # (B, 32, 12, 12)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)          # (B, 64, 4, 4)
        return self.f2(F.relu(self.f1(x.flatten(1))))    # (B, 10)


def evaluate(model, x, y, rank, world):
    """Loss and accuracy over the whole test set, each rank taking every world-th sample."""
    model.eval()
    with torch.no_grad():
        logits = model(x[rank::world])
        totals = torch.tensor([F.cross_entropy(logits, y[rank::world], reduction="sum").item(),
                               (logits.argmax(1) == y[rank::world]).sum().item(),
                               float(len(logits))], dtype=torch.float64)
    dist.all_reduce(totals)
    model.train()
    return totals[0].item() / totals[2].item(), totals[1].item() / totals[2].item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch_size", "--batch-size", type=int, default=64, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--log_every", "--log-every", type=int, default=100)
    ap.add_argument("--backend", default="heft", help="heft, or gloo to compare")
    ap.add_argument("--data", default=os.environ.get("SM_CHANNEL_TRAIN",
                                                     "/usr/share/datasets/fashion-mnist"))
    args = ap.parse_args()

    dist.init_process_group(args.backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world:
        raise SystemExit(f"--batch_size {args.batch_size} must divide by the {world} workers")
    torch.manual_seed(0)
    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "t10k")
    model = nn.parallel.DistributedDataParallel(CNN())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    per_rank = args.batch_size // world
    step, train_seconds, test_acc = 0, 0.0, float("nan")
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=torch.Generator().manual_seed(epoch))
        if args.limit:
            order = order[:args.limit]
        steps = len(order) // args.batch_size
        start, seen = time.perf_counter(), 0
        for i in range(steps):
            batch = order[i * args.batch_size:(i + 1) * args.batch_size][rank::world]
            assert len(batch) == per_rank
            opt.zero_grad()
            loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            opt.step()
            step += 1
            seen += args.batch_size
            if rank == 0 and step % args.log_every == 0:
                print(f"step={step} epoch={epoch} loss={loss.item():.4f} "
                      f"samples_per_s={seen / (time.perf_counter() - start):.1f}", flush=True)
        train_seconds += time.perf_counter() - start
        test_loss, test_acc = evaluate(model, x_test, y_test, rank, world)
        if rank == 0:
            print(f"epoch={epoch} test_loss={test_loss:.4f} test_acc={test_acc:.4f} "
                  f"seconds={time.perf_counter() - start:.1f} backend={args.backend}", flush=True)
    if rank == 0:
        samples = step * args.batch_size
        print(f"final: step={step} test_acc={test_acc:.4f} "
              f"samples_per_s={samples / max(train_seconds, 1e-9):.1f} seconds={train_seconds:.1f} "
              f"backend={args.backend}", flush=True)
    if rank == 0 and os.environ.get("SM_MODEL_DIR"):
        torch.save(model.module.state_dict(), os.path.join(os.environ["SM_MODEL_DIR"], "model.pt"))
    # Let every rank's last collective finish, and drop the DDP model while the group is still
    # alive: with torch 1.13's Gloo, a DDP model whose destruction ends its process group can
    # deadlock at exit (the group's worker thread frees a tensor and needs the GIL that the
    # destructor holds).
    dist.barrier()
    del model, opt
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
