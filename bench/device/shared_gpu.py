#!/usr/bin/env python3
"""Two ranks sharing one GPU, on backend heft (CUDA tensors staged through pinned host memory
onto heft's shared-memory collectives) or Gloo (which stages them its own way): a
deterministic DDP model trained 5 steps on cuda:0 (its parameters' SHA-256 after them: equal
on both backends bit for bit, as a sum of two values has one result in either order), then
dist.all_reduce of float32 CUDA tensors of 1, 16 and 64 MiB timed (mean of 10 after 2 warm-ups,
synchronised; nccl-tests' algbw and busbw). Rank 0 writes the figures to --out as JSON.

    heft run -n 2 -- python3 bench/device/shared_gpu.py --backend heft --out heft.json
    python3 bench/device/shared_gpu.py compare gloo.json heft.json
"""
import argparse
import hashlib
import json
import sys
import time

import torch
import torch.distributed as dist


def run(a):
    if a.backend == "heft":
        import heft.torch  # noqa: F401  registers the backend
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)  # both ranks on the one GPU
    torch.cuda.set_device(dev)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256)).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(5):
        x = torch.randn(64, 256, generator=g).to(dev)
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    rows = []
    for mib in (1, 16, 64):
        t = torch.ones(mib << 18, device=dev)
        for _ in range(2):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(10):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        s = (time.perf_counter() - start) / 10
        algbw = (mib << 20) / s / 1e9
        rows.append({"bytes": mib << 20, "ms": s * 1e3, "algbw": algbw,
                     "busbw": algbw * 2 * (world - 1) / world})
    staged = None
    if a.backend == "heft":
        staged = heft.torch.ProcessGroupHeft.cuda_staged()
    if rank == 0:
        out = {"backend": a.backend, "world": world, "sha256": h.hexdigest(), "losses": losses,
               "rows": rows, "staged": staged, "gpu": torch.cuda.get_device_name(0)}
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def compare(gloo_file, heft_file):
    g, h = (json.load(open(f)) for f in (gloo_file, heft_file))
    same = g["sha256"] == h["sha256"]
    print(f"shared_gpu_bit_for_bit: {'yes' if same else 'NO'} (gloo {g['sha256'][:16]}, heft {h['sha256'][:16]})")
    print(f"shared_gpu_heft_staged: {h['staged']}")
    for rg, rh in zip(g["rows"], h["rows"]):
        print(f"shared_gpu_allreduce_{rg['bytes'] >> 20}MiB: heft {rh['ms']:.3f} ms "
              f"(busbw {rh['busbw']:.2f} GB/s), gloo {rg['ms']:.3f} ms (busbw {rg['busbw']:.2f}); "
              f"heft/gloo speed {rg['ms'] / rh['ms']:.2f}x")
    return 0 if same else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["heft", "gloo"], required=True)
    ap.add_argument("--out", required=True)
    run(ap.parse_args())
