#!/usr/bin/env python3
"""estimate_memory's prediction against the peak resident memory a real run reaches, on
models nobody here wrote (torchvision's resnet18 and a VisionTransformer) under each Python
strategy: torch's DDP over heft and heft's ShardedDataParallel on 2 ranks, and one process.

Each case runs twice, each time its own `heft run` job (fresh processes: ru_maxrss is the
run's own). First every rank builds the model, estimates its layout's memory with its own
batch (the measurement runs in the same process, as a pre-flight would), wraps the model,
trains --steps steps with AdamW and prints `predicted=B measured=B` (ru_maxrss: the
measurement's own peak included, which the prediction's profile_floor covers). Then the same
training without the estimate: its peak against the prediction without profile_floor (what a
rank needs when the estimate ran elsewhere). Rank 0's lines, then a markdown table.

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


def worker(case, steps, estimate=True):
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
    est = None
    if estimate:
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
    if rank == 0 and est is None:
        print(f"case={case} train_only_measured={peak}", flush=True)
    elif rank == 0:
        parts = " ".join(f"{k}={v}" for k, v in est.parts.items() if v)
        print(f"case={case} predicted={est.total_bytes} measured={peak} estimate_s={est_s:.1f} "
              f"{parts}", flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--no-estimate", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps, estimate=not a.no_estimate)
    py = os.path.join(ROOT, ".venv", "bin", "python")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = []

    def run(case, *extra):
        n = "1" if case.endswith("single") else "2"
        cmd = [os.path.join(a.build, "heft"), "run", "-n", n, "--", py, "-u", __file__,
               "--worker", case, "--steps", str(a.steps), *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
        line = next((l[l.index("case="):] for l in r.stdout.splitlines() if "case=" in l), None)
        if r.returncode != 0 or line is None:
            print(f"{case}: FAILED (exit {r.returncode})\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
            return None
        print(line, flush=True)
        return dict(kv.split("=", 1) for kv in line.split())

    for case in a.cases.split(","):
        f, g = run(case), run(case, "--no-estimate")
        if f and g:
            rows.append((case, int(f["predicted"]), int(f["measured"]),
                         int(f["predicted"]) - int(f.get("profile_floor", 0)),
                         int(g["train_only_measured"]), f["estimate_s"]))
    print("\n| case | predicted MB | measured MB (estimate + training) | ratio | predicted without "
          "the measurement's peak MB | measured MB (training alone) | ratio | estimate s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, p, m, p2, m2, s in rows:
        print(f"| {case} | {p / 1e6:.0f} | {m / 1e6:.0f} | {p / m:.3f} | {p2 / 1e6:.0f} | "
              f"{m2 / 1e6:.0f} | {p2 / m2:.3f} | {s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
