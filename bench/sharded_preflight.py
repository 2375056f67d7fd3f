#!/usr/bin/env python3
"""ShardedDataParallel's own memory pre-flight against real runs: GPTs with a 50,257-token
vocabulary tied to their head (and one with a 5,000-token one), built under deferred_init and
wrapped by ShardedDataParallel on 4 ranks of this machine (`heft run -n 4`), AdamW, one
sequence of 32 tokens a rank and step. Each rank prints its resident set before the wrapper,
the pre-flight's plan (sdp.memory_plan: what the rank will add, before activations) and its
peak resident set after --steps steps (ru_maxrss); the table gives rank 0's predicted peak
(before + plan), the measured peak and their ratio, and the largest rank's. Then the issue's
case: a 1.0e9-parameter GPT of the same vocabulary on 4 ranks: the seconds from `heft run`'s
start to its exit and the pre-flight's MemoryError (or, on a machine that holds it, its run).

    bench/sharded_preflight.py [--steps 3] [--cases s,m,5k,l] [--no-1b]
    build/heft run -n 4 -- .venv/bin/python bench/sharded_preflight.py --worker CASE
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# name: (layers, width, heads, vocabulary)
CASES = {"s": (4, 512, 8, 50257), "m": (4, 1024, 16, 50257), "5k": (8, 1024, 16, 5000),
         "l": (12, 1536, 12, 50257), "1b": (24, 1792, 14, 50257)}
BLOCK = 32


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker(case, steps):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import gpt_sharded as G
    from heft.torch import parallel
    torch.set_num_threads(1)
    layers, width, heads, vocab = CASES[case]
    dist.init_process_group("heft")
    rank = dist.get_rank()
    with parallel.deferred_init():
        model = G.GPT(layers, heads, width, BLOCK, vocab)
    count = parallel.parameter_count(model)
    before = rss_bytes()
    try:
        sdp = parallel.ShardedDataParallel(model, units=[G.Block])
    except MemoryError as e:
        print(f"refused: rank={rank} {e}", flush=True)
        raise SystemExit(1)
    plan = sdp.memory_plan
    opt = torch.optim.AdamW(sdp.parameters(), lr=1e-5)
    g = torch.Generator().manual_seed(rank)
    for _ in range(steps):
        x = torch.randint(0, 256, (1, BLOCK), generator=g)
        y = torch.randint(0, 256, (1, BLOCK), generator=g)
        loss = F.cross_entropy(sdp(x).float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        sdp.clip_grad_norm_(1.0)
        opt.step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    parts = " ".join(f"{k}={v}" for k, v in plan.items())
    print(f"result: rank={rank} parameters={count} before={before} plan={sum(plan.values())} "
          f"peak={peak} {parts}", flush=True)
    dist.destroy_process_group()


def run(case, steps, timeout=1800):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    cmd = [os.path.join(ROOT, "build", "heft"), "run", "-n", "4", "--", sys.executable, "-u",
           os.path.abspath(__file__), "--worker", case, "--steps", str(steps)]
    start = time.monotonic()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr, time.monotonic() - start


def machine():
    def cpu(key):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if re.match(key, line):
                    return line.split(":", 1)[1].strip()
        return "?"
    model = cpu(r"model\s")
    line = (f"# machine: {os.cpu_count()} cores, {cpu('model name')} (family {cpu('cpu family')} "
            f"model {model}); date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    bench = os.path.join(ROOT, "build", "memory_bandwidth_bench")
    if os.path.exists(bench):
        out = subprocess.run([bench, "--benchmark_filter=BM_Memcpy/1048576$",
                              "--benchmark_min_time=0.1", "--benchmark_format=csv"],
                             capture_output=True, text=True).stdout
        rows = [r for r in out.splitlines() if r.startswith('"BM_Memcpy') or r.startswith("BM_Memcpy")]
        if rows:
            line += f"; memcpy {float(rows[0].split(',')[5]) / 1e9:.1f} GB/s at 1 MiB"
    return line


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=sorted(CASES))
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cases", default="s,m,5k,l")
    ap.add_argument("--no-1b", action="store_true", help="skip the 1e9-parameter case")
    a = ap.parse_args()
    if a.worker:
        return worker(a.worker, a.steps)
    print(machine(), flush=True)
    print("| case | parameters | rank 0 before MB | plan MB | predicted peak MB | measured peak MB "
          "| measured / predicted | worst rank's ratio | seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case in a.cases.split(","):
        rc, out, secs = run(case, a.steps)
        rows = [dict(kv.split("=") for kv in m.group(1).split())
                for m in re.finditer(r"result: (.*)", out)]
        if rc != 0 or len(rows) != 4:
            print(f"| {case} | failed (exit {rc}) |\n{out[-3000:]}", flush=True)
            continue
        ratios = [int(r["peak"]) / (int(r["before"]) + int(r["plan"])) for r in rows]
        r0 = next(r for r in rows if r["rank"] == "0")
        layers, width, _, vocab = CASES[case]
        print(f"| {layers} x {width}, vocab {vocab} | {int(r0['parameters']):,} "
              f"| {int(r0['before']) / 2**20:.0f} | {int(r0['plan']) / 2**20:.0f} "
              f"| {(int(r0['before']) + int(r0['plan'])) / 2**20:.0f} "
              f"| {int(r0['peak']) / 2**20:.0f} | {int(r0['peak']) / (int(r0['before']) + int(r0['plan'])):.3f} "
              f"| {max(ratios, key=lambda x: abs(x - 1)):.3f} | {secs:.0f} |", flush=True)
    if not a.no_1b:
        rc, out, secs = run("1b", a.steps)
        refused = re.findall(r"refused: rank=(\d) (.*)", out)
        print(f"\n## 1b: {CASES['1b'][0]} x {CASES['1b'][1]}, vocab {CASES['1b'][3]}, 4 ranks: "
              f"exit {rc} after {secs:.1f} s; {len(refused)} rank(s) refused", flush=True)
        if refused:
            print(refused[0][1])
        else:
            print("\n".join(line for line in out.splitlines() if "result:" in line))


if __name__ == "__main__":
    main()
