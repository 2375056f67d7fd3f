#!/usr/bin/env python3
"""estimate_memory's prediction against the peak resident memory a real run reaches, on
models nobody here wrote (torchvision's resnet18 and a VisionTransformer) under each Python
strategy: torch's DDP over heft and heft's ShardedDataParallel on 2 ranks, and one process.

Each case is its own `heft run` job (a fresh process per rank: ru_maxrss is the run's own):
every rank builds the model, estimates its layout's memory with its own batch (the
measurement runs in the same process, as a pre-flight would), wraps the model, trains
--steps steps with AdamW and prints `predicted=B measured=B` (the measured peak is
ru_maxrss). Rank 0's line per case, then a markdown table with prediction/measured.

    bench/memory_estimate.py [--steps 5] [--cases resnet18-ddp,vit-sharded,...]
    build/heft run -n 2 -- .venv/bin/python bench/memory_estimate.py --worker CASE  (one case)
"""
import argparse
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["resnet18-single", "resnet18-ddp", "resnet18-sharded",
         "vit-single", "vit-ddp", "vit-sharded"]
BATCH, IMAGE, CLASSES = 32, 64, 100


def model_of(name):
    import torch
    torch.manual_seed(0)
    if name == "resnet18":
        from torchvision.models import resnet18
        import torch.nn as nn
        # GroupNorm: per-sample normalisation (no batch statistics across ranks)
        return resnet18(num_classes=CLASSES, norm_layer=lambda c: nn.GroupNorm(32, c))
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=IMAGE, patch_size=8, num_layers=6, num_heads=8,
                             hidden_dim=384, mlp_dim=1536, num_classes=CLASSES)


def worker(case, steps):
    import torch
    import torch.nn.functional as F
    import heft.torch.distributed as hd
    from heft.torch import parallel
    torch.set_num_threads(1)
    name, strategy = case.split("-")
    world = 1
    if strategy != "single":
        hd.init_process_group()
        world = torch.distributed.get_world_size()
    rank = torch.distributed.get_rank() if world > 1 else 0
    model = model_of(name)
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g)
    y = torch.randint(0, CLASSES, (BATCH,), generator=g)
    t0 = time.monotonic()
    est = parallel.estimate_memory(model, x, "sharded" if strategy == "sharded" else "ddp",
                                   world=world, optimizer="adamw",
                                   loss_fn=lambda out: F.cross_entropy(out, y))
    est_s = time.monotonic() - t0
    if strategy == "ddp":
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    elif strategy == "sharded":
        wrapped = parallel.ShardedDataParallel(model)
    else:
        wrapped = model
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
    for _ in range(steps):
        loss = F.cross_entropy(wrapped(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if rank == 0:
        parts = " ".join(f"{k}={v}" for k, v in est.parts.items() if v)
        print(f"case={case} predicted={est.total_bytes} measured={peak} estimate_s={est_s:.1f} "
              f"{parts}", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps)
    py = os.path.join(ROOT, ".venv", "bin", "python")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []
    for case in a.cases.split(","):
        n = "1" if case.endswith("single") else "2"
        cmd = [os.path.join(a.build, "heft"), "run", "-n", n, "--", py, "-u", __file__,
               "--worker", case, "--steps", str(a.steps)]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        line = next((l[l.index("case="):] for l in r.stdout.splitlines() if "case=" in l), None)
        if r.returncode != 0 or line is None:
            print(f"{case}: FAILED (exit {r.returncode})\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            continue
        print(line, flush=True)
        f = dict(kv.split("=", 1) for kv in line.split())
        rows.append((case, int(f["predicted"]), int(f["measured"]), f["estimate_s"]))
    print("\n| case | predicted MB | measured peak RSS MB | predicted / measured | estimate s |")
    print("| --- | --- | --- | --- | --- |")
    for case, p, m, s in rows:
        print(f"| {case} | {p / 1e6:.0f} | {m / 1e6:.0f} | {p / m:.3f} | {s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
