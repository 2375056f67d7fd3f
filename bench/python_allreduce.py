#!/usr/bin/env python3
"""all_reduce timed from Python through torch.distributed, on backend heft or gloo, printed in
the nccl-tests convention (the columns of ../shared/peers/allreduce_gloo.py and `heft bench`).

    build/heft run -n 4 -- /usr/bin/python3 bench/python_allreduce.py --backend heft

One rank per process started by `heft run` (torch's env:// rendezvous). Float32 sum, in
place on one tensor per size (zeros while timed: no overflow, no copy per call); the time
of a size is the mean over --iters calls of the slowest rank. Checks one sum per size first.
"""
import argparse
import time

import torch
import torch.distributed as dist


def size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="heft")
    ap.add_argument("--min", default="4K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    if a.backend == "heft":
        import heft.torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group(a.backend, init_method="env://")
    r, n = dist.get_rank(), dist.get_world_size()
    if r == 0:
        print(f"# impl=python-{a.backend} ranks={n}\n# bytes time_us algbw_GBps busbw_GBps", flush=True)
    b = size(a.min)
    while b <= size(a.max):
        y = torch.ones(b // 4)
        dist.all_reduce(y)
        assert y[0].item() == n and y[-1].item() == n, "wrong sum"
        y.zero_()
        for _ in range(a.warmup):
            dist.all_reduce(y)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(y)
        t = torch.tensor([(time.perf_counter() - t0) / a.iters])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if r == 0:
            alg = b / t.item() / 1e9
            print(f"{b} {t.item() * 1e6:.1f} {alg:.3f} {alg * 2 * (n - 1) / n:.3f}", flush=True)
        b *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
