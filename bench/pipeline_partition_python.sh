#!/bin/sh
# heft.torch.parallel.Pipeline's automatic partition (partition="auto": each layer profiled
# on rank 0, heft's C++ partitioner) on a heavy-head model, against every split: 8 light
# layers (Linear 128 -> 256 -> 128, GELU) and a head 8 times heavier (128 -> 2048 -> 128),
# 2 stages on 2 ranks (one thread each), interleaved, 4 micro-batches of 256 rows, SGD. Each
# split (the first layer of stage 1: 1..8) and the automatic one are timed STEPS steps per
# round (steps 3..STEPS, rank 0's pipe.step + opt.step), ROUNDS rounds alternated. Prints
# the automatic plan, then, by the median and by the fastest of the step times, each split's
# seconds, the automatic split's beside the uniform split's (by layer count: [4], 4 + 5
# layers) and the best split found by trying all; "ok" when auto <= uniform and auto <= 1.10
# x best. On a loaded machine the stages do not run side by side and the figures say little:
# read the load printed first.
#
# usage: bench/pipeline_partition_python.sh [BUILD_DIR]   (default build; STEPS=12 ROUNDS=3)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${STEPS:-12}
rounds=${ROUNDS:-3}
for f in "$build/heft" "$build/python/heft/torch/parallel/pipeline/__init__.py"; do
  [ -e "$f" ] || { echo "pipeline_partition_python: $f not found; build first" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/bench.py" <<'EOF'
import statistics, sys, time
import torch, torch.distributed as dist, torch.nn as nn
import heft.torch  # noqa: F401
from heft.torch.parallel import DeviceMesh, Pipeline

steps, rounds = int(sys.argv[1]), int(sys.argv[2])
D, LIGHT, HEAVY, LAYERS, M, ROWS = 128, 256, 2048, 8, 4, 256
dist.init_process_group("heft", init_method="env://")
mesh = DeviceMesh(pipeline=2)


def mlp(hidden):
    return nn.Sequential(nn.Linear(D, hidden), nn.GELU(), nn.Linear(hidden, D))


def model():
    torch.manual_seed(0)
    return nn.Sequential(*[mlp(LIGHT) for _ in range(LAYERS)], mlp(HEAVY))


x = torch.randn(M * ROWS, D, generator=torch.Generator().manual_seed(1))
loss = lambda o, y: (o - y).pow(2).mean()
times = {}
chosen = None
for r in range(rounds):
    for split in ["auto"] + list(range(1, LAYERS + 1)):
        partition = "auto" if split == "auto" else [split]
        pipe = Pipeline(model(), mesh, microbatches=M, schedule="interleaved",
                        partition=partition, example_input=x[:ROWS])
        if split == "auto":
            chosen = pipe.first[1]
            if r == 0 and dist.get_rank() == 0:
                print("auto_plan " + pipe.plan_text.rstrip().replace("\n", "\nauto_plan "),
                      flush=True)
        params = list(pipe.parameters())
        opt = torch.optim.SGD(params, lr=1e-3) if params else None
        for step in range(steps):
            t0 = time.perf_counter()
            if opt:
                opt.zero_grad()
            pipe.step(x, x, loss)
            if opt:
                opt.step()
            if step >= 2:
                times.setdefault(split, []).append(time.perf_counter() - t0)
if dist.get_rank() == 0:
    for name, f in (("median", statistics.median), ("fastest", min)):
        med = {s: f(v) for s, v in times.items()}
        for s in range(1, LAYERS + 1):
            print(f"split {name} {s} {med[s]:.4f}", flush=True)
        best = min(range(1, LAYERS + 1), key=med.get)
        uniform = (LAYERS + 1) // 2
        a = med["auto"]
        print(f"auto {name} {chosen} {a:.4f}", flush=True)
        print(f"uniform {name} {uniform} {med[uniform]:.4f}", flush=True)
        print(f"best {name} {best} {med[best]:.4f}", flush=True)
        print(f"check {name} auto<=uniform {'ok' if a <= med[uniform] else 'ABOVE'}; "
              f"auto<=1.10*best {'ok' if a <= 1.10 * med[best] else 'ABOVE'} "
              f"({a / med[best]:.3f})", flush=True)
dist.destroy_process_group()
EOF
echo "# pipeline_partition_python: $(date -u +%Y-%m-%dT%H:%MZ); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $("$build/memory_bandwidth_bench" --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
echo "# split|auto|uniform|best median|fastest first_layer_of_stage_1 step_s"
OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- .venv/bin/python -u "$work/bench.py" "$steps" "$rounds" |
  sed -n 's/^\[rank 0\] //p' | grep -E '^(split|auto|uniform|best|check)'
