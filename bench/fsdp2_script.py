"""A plain torch 2 FSDP2 script made faster by naming heft (issue "A PyTorch 2 training script
gets faster by naming heft"): examples/fsdp2_gpt.py (4 blocks of width 128, byte vocabulary,
global batch 16 x 64 tokens, AdamW, fp32) with --backend gloo and --backend heft at 2 and 4
ranks, and at 4 ranks with the library v2's two lines (--tsm 2: tensor 2 x FSDP2 over data
2, on heft), one thread per rank. --rounds rounds, the sides' order rotating each round.
Per side: the median and the worst round's tokens/s (all ranks, after 2 warm-up steps) and
the final loss (every side must agree); then heft against Gloo: the ratio of the medians and
the worst round's ratio (each round's heft run against that round's Gloo run).

    .venv/bin/python bench/fsdp2_script.py [--rounds 3] [--steps 40]
Prints the machine (CPU, torch, memcpy GB/s) first."""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEFT, PY = os.path.join(ROOT, "build", "heft"), os.path.join(ROOT, ".venv", "bin", "python")
FINAL = re.compile(r"final: step=\d+ loss=(\S+) tokens_per_s=(\d+)")
SIDES = [("gloo", 2, ["--backend", "gloo"]), ("heft", 2, ["--backend", "heft"]),
         ("gloo", 4, ["--backend", "gloo"]), ("heft", 4, ["--backend", "heft"]),
         ("heft+tsm2", 4, ["--backend", "heft", "--tsm", "2"])]


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    torch = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout.strip()
    line = f"# machine: {os.cpu_count()} cores, {cpu}; torch {torch}"
    bench = os.path.join(ROOT, "build", "memory_bandwidth_bench")
    if os.path.exists(bench):
        out = subprocess.run([bench, "--benchmark_filter=BM_Memcpy/(1048576|4194304)$",
                              "--benchmark_min_time=0.1", "--benchmark_format=csv"],
                             capture_output=True, text=True).stdout
        rates = [f"{r.split(',')[0].strip(chr(34)).split('/')[1]}: "
                 f"{float(r.split(',')[5]) / 1e9:.1f}" for r in out.splitlines()
                 if r.startswith('"BM_Memcpy') or r.startswith("BM_Memcpy")]
        line += "; memcpy GB/s " + "  ".join(rates)
    print(line, flush=True)


def run(ranks, flags, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([HEFT, "run", "-n", str(ranks), "--", PY, "-u",
                        os.path.join(ROOT, "examples", "fsdp2_gpt.py"), "--steps", str(steps),
                        "--log_every", "100000", *flags], capture_output=True, text=True,
                       timeout=900, env=env)
    m = FINAL.search(r.stdout)
    if r.returncode or not m:
        sys.exit(f"fsdp2_script: {ranks} ranks {flags} failed:\n{(r.stdout + r.stderr)[-3000:]}")
    return float(m[2]), m[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    machine()
    print(f"# steps={args.steps} rounds={args.rounds}; load "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
    rates, losses = {}, {}
    for k in range(args.rounds):
        order = SIDES[k % len(SIDES):] + SIDES[:k % len(SIDES)]
        for name, ranks, flags in order:
            rate, loss = run(ranks, flags, args.steps)
            rates.setdefault((name, ranks), [None] * args.rounds)[k] = rate
            losses.setdefault((name, ranks), set()).add(loss)
            print(f"round {k + 1}: {name:10s} {ranks} ranks  {rate:8.0f} tokens/s  loss {loss}",
                  flush=True)
    print("\nside        ranks  median tokens/s  worst  final loss")
    for (name, ranks), r in rates.items():
        print(f"{name:10s}  {ranks:5d}  {statistics.median(r):15.0f}  {min(r):5.0f}  "
              f"{','.join(sorted(losses[(name, ranks)]))}")
    print("\nagainst FSDP2 on Gloo, same ranks   median ratio  worst round's ratio")
    for name, ranks in rates:
        if name == "gloo":
            continue
        gloo, mine = rates[("gloo", ranks)], rates[(name, ranks)]
        worst = min(a / b for a, b in zip(mine, gloo))
        print(f"{name:10s} {ranks} ranks                 "
              f"{statistics.median(mine) / statistics.median(gloo):5.2f}x  {worst:5.2f}x")


if __name__ == "__main__":
    main()
