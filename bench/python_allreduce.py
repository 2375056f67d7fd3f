#!/usr/bin/env python3
"""all_reduce timed from Python through torch.distributed, on backend heft or gloo, printed in
the nccl-tests convention (the columns of ../shared/peers/allreduce_gloo.py and `heft bench`).

    build/heft run -n 4 -- .venv/bin/python bench/python_allreduce.py --backend heft

One rank per process started by `heft run` (torch's env:// rendezvous). Float32 sum, in
place on one tensor per size (zeros while timed: no overflow, no copy per call); the time
of a size is the mean over --iters calls of the slowest rank (as `heft bench` times). Checks
one sum per size first. On heft, each row ends with the path heft's allreduce took (as `heft
bench` prints it). --waits adds, per size, a comment line with the timed calls' cost per call,
summed over the ranks: CPU and run-queue wait of the ranks' threads (/proc schedstat; of
them, the threads other than the caller's), context switches, and on heft how the
shared-memory waits ended (spun, yielded, slept; contended: slow yields that made the next
50 ms of waits sleep at once): where a rank's time goes besides the copies.

--paired FILE (heft only): `heft bench`'s own loop in the same processes, on the same
communicator, in the same minutes: per size, --pairs alternations of --iters dist.all_reduce
calls and --iters calls of heft's blocking C++ allreduce (the group's bench_allreduce: what
`heft bench` times, without torch's wrapper); each side's time is the median of its blocks
(a block's time: the slowest rank's), the Python rows go to stdout and heft's to FILE. Two
separate processes timed minutes apart may land in different placements of the host's vCPUs
(near and far run 2-3x apart); paired, the ratio is the Python path's cost alone.

    bench/python_allreduce.py summarize [--from 1M] PY_HEFT... -- HEFT_BENCH... -- GLOO... [-- PY_PAIRED... -- NATIVE...]

(bench/python_vs_gloo.sh) reads the rounds of each (files in round order, this script's and
`heft bench`'s rows) and prints a markdown table per size from --from bytes on: each
one's median busbw, python_heft/heft_bench from the medians and in the worst round (the
round's two runs side by side), and python_heft/gloo; with PY_PAIRED and NATIVE (the stdout and the
--paired FILE of runs with --paired), their python/native too, median and worst round: heft's
own loop timed in the same processes and minutes as the Python calls.
"""
import argparse
import os
import statistics
import sys
import threading
import time


def size(s):
    m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * m[s[-1]] if s[-1] in m else int(s)


def read_busbw(path):
    """{bytes: busbw} of one run's rows (`bytes time_us algbw busbw [path]`)."""
    rows = {}
    for line in open(path):
        parts = line.split()
        if parts and not line.startswith("#"):
            rows[int(parts[0])] = float(parts[3])
    return rows


def thread_stats():
    """[cpu_ns, runqueue_wait_ns, voluntary, involuntary] of this process's caller thread and
    of its other threads, from /proc (zeros where it cannot be read)."""
    me = threading.get_native_id()
    out = {"caller": [0, 0, 0, 0], "others": [0, 0, 0, 0]}
    for tid in os.listdir("/proc/self/task"):
        try:
            run, wait, _ = map(int, open(f"/proc/self/task/{tid}/schedstat").read().split())
            st = dict(l.split(":", 1) for l in open(f"/proc/self/task/{tid}/status") if ":" in l)
            row = [run, wait, int(st["voluntary_ctxt_switches"]), int(st["nonvoluntary_ctxt_switches"])]
        except (OSError, ValueError, KeyError):
            continue
        acc = out["caller" if int(tid) == me else "others"]
        for i, v in enumerate(row):
            acc[i] += v
    return out["caller"] + out["others"]


WAIT_KEYS = ("syncs", "spun", "yielded", "slept", "contended")


def waits(pg):
    """This rank's shared-memory wait counters (heft), else zeros."""
    c = pg.shm_waits() if hasattr(pg, "shm_waits") else {}
    return [c.get(k, 0) for k in WAIT_KEYS]


def summarize(argv):
    start = "1M"
    if argv[:1] == ["--from"]:
        start, argv = argv[1], argv[2:]
    groups = [[]]
    for f in argv:
        if f == "--":
            groups.append([])
        else:
            groups[-1].append(f)
    if len(groups) not in (3, 5) or len({len(g) for g in groups}) != 1 or not groups[0]:
        sys.exit("summarize: expected PY_HEFT... -- HEFT_BENCH... -- GLOO... "
                 "[-- PY_PAIRED... -- NATIVE...], as many rounds each")
    py, hb, gl, *paired = ([read_busbw(f) for f in g] for g in groups)
    pp, nat = paired if paired else ([], [])
    print("| bytes | python_heft busbw | heft_bench busbw | gloo busbw | python/heft_bench "
          "median | worst round | python_heft/gloo |"
          + (" paired: python busbw | native busbw | python/native median | worst round |" if nat else ""))
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: | ---: | ---: |" if nat else ""))
    for b in sorted(py[0]):
        if b < size(start) or any(b not in r for r in py + hb + gl + pp + nat):
            continue
        mp, mh, mg = (statistics.median(r[b] for r in runs) for runs in (py, hb, gl))
        worst = min(p[b] / h[b] for p, h in zip(py, hb))
        line = f"| {b} | {mp:.3f} | {mh:.3f} | {mg:.3f} | {mp / mh:.2f} | {worst:.2f} | {mp / mg:.2f} |"
        if nat:
            ratios = [p[b] / q[b] for p, q in zip(pp, nat)]
            line += (f" {statistics.median(p[b] for p in pp):.3f} |"
                     f" {statistics.median(q[b] for q in nat):.3f} | {statistics.median(ratios):.2f} |"
                     f" {min(ratios):.2f} |")
        print(line)


def main():
    if sys.argv[1:2] == ["summarize"]:
        return summarize(sys.argv[2:])
    import torch
    import torch.distributed as dist
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="heft")
    ap.add_argument("--min", default="4K")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--paired", metavar="FILE",
                    help="heft: alternate with heft's own C++ loop on the same group; its rows to FILE")
    ap.add_argument("--pairs", type=int, default=5, help="--paired: alternations per size")
    ap.add_argument("--waits", action="store_true",
                    help="print each size's per-call CPU, run-queue wait and switches of the "
                         "ranks' threads and (heft) how the shared-memory waits ended")
    a = ap.parse_args()
    if a.paired and a.backend != "heft":
        sys.exit("python_allreduce: --paired needs --backend heft")
    if a.backend == "heft":
        import heft.torch
    torch.set_num_threads(1)
    dist.init_process_group(a.backend, init_method="env://")
    r, n = dist.get_rank(), dist.get_world_size()
    # heft's backend behind the default group (its counters, bench_allreduce); None on Gloo.
    pg = heft.torch.backend_of() if a.backend == "heft" else None
    heft_path = getattr(pg, "last_allreduce_path", None)
    native = open(a.paired, "w") if a.paired and r == 0 else None
    if r == 0:
        print(f"# impl=python-{a.backend} ranks={n}\n# bytes time_us algbw_GBps busbw_GBps", flush=True)
        if native:
            print(f"# impl=heft-native (bench_allreduce, paired with python-heft) ranks={n}\n"
                  "# bytes time_us algbw_GBps busbw_GBps", file=native, flush=True)

    def slowest(seconds):
        t = torch.tensor([seconds])
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def row(b, t):
        alg = b / t / 1e9
        return f"{b} {t * 1e6:.1f} {alg:.3f} {alg * 2 * (n - 1) / n:.3f}"
    b = size(a.min)
    while b <= size(a.max):
        y = torch.ones(b // 4)
        dist.all_reduce(y)
        assert y[0].item() == n and y[-1].item() == n, "wrong sum"
        y.zero_()
        for _ in range(a.warmup):
            dist.all_reduce(y)
        if a.paired:
            py_t, nat_t, paths = [], [], []
            if a.warmup:
                pg.bench_allreduce(y, a.warmup)
            for _ in range(a.pairs):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(a.iters):
                    dist.all_reduce(y)
                t = (time.perf_counter() - t0) / a.iters
                paths.append(heft_path())
                py_t.append(slowest(t))
                dist.barrier()
                t = pg.bench_allreduce(y, a.iters)
                paths.append(heft_path())
                nat_t.append(slowest(t))
            if r == 0:
                print(f"{row(b, statistics.median(py_t))} {paths[0]}", flush=True)
                print(f"{row(b, statistics.median(nat_t))} {paths[1]}", file=native, flush=True)
            b *= 4
            continue
        dist.barrier()
        before = thread_stats() + waits(pg) if a.waits else None
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(y)
        t = torch.tensor([(time.perf_counter() - t0) / a.iters])
        if a.waits:
            cost = torch.tensor([x - y0 for x, y0 in zip(thread_stats() + waits(pg), before)],
                                dtype=torch.float64) / a.iters
        path = f" {heft_path()}" if heft_path else ""
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if a.waits:
            dist.all_reduce(cost)
        if r == 0:
            print(f"{row(b, t.item())}{path}", flush=True)
            if a.waits:
                c = cost.tolist()
                print(f"# per call, all ranks: cpu_us {c[0] / 1e3:.1f} runq_wait_us {c[1] / 1e3:.1f} "
                      f"vol {c[2]:.2f} invol {c[3]:.2f}; other threads: cpu_us {c[4] / 1e3:.2f} "
                      f"runq_wait_us {c[5] / 1e3:.2f} vol {c[6]:.2f} invol {c[7]:.2f}; shm "
                      + " ".join(f"{k} {v:.2f}" for k, v in zip(WAIT_KEYS, c[8:])), flush=True)
        b *= 4
    if native:
        native.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
