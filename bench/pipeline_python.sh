#!/bin/sh
# heft.torch.parallel.Pipeline (the user's own PyTorch model on heft's C++ schedules and
# run_stage) on 2 ranks, one thread each:
#  1. bubble: 8 equal synthetic layers (Linear 512 -> 512 + tanh, 128 rows per micro-batch) on
#     2 stages, simple and interleaved, m = 4 and 8: each stage's idle fraction (1 - compute
#     seconds / step seconds, the runtime's counters, median of STEPS steps) beside the theory
#     (p-1)/(m+p-1); "ok" when within theory + 0.05.
#  2. step time: heft-train's GPT (n_layer 4, n_embd 128, 4 heads, block 128, untied head)
#     written in plain PyTorch as a sequence (embeddings, 4 blocks, head), split after block 1
#     as heft-train splits it, interleaved, 8 micro-batches, 16 x 128 bytes per step: the
#     Python step's seconds (pipe.step + AdamW, rank 0) beside heft-train's C++ pipeline on the
#     same layout (its per-step tokens_per_s), median and worst of steps 3..STEPS, ROUNDS
#     rounds alternated.
#
# usage: bench/pipeline_python.sh [BUILD_DIR]   (default build; STEPS=20 ROUNDS=2)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${STEPS:-20}
rounds=${ROUNDS:-2}
for f in "$build/heft" "$build/heft-train" "$build/python/heft/torch/_pipeline.py"; do
  [ -e "$f" ] || { echo "pipeline_python: $f not found; build first" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/bench.py" <<'EOF'
import math, statistics, sys, time
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
import heft.torch  # noqa: F401
from heft.torch.parallel import DeviceMesh, Pipeline

mode, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("heft", init_method="env://")
mesh = DeviceMesh(pipeline=2)


class Emb(nn.Module):
    def __init__(s, d, t):
        super().__init__(); s.tok, s.pos = nn.Embedding(256, d), nn.Embedding(t, d)
    def forward(s, idx):
        return s.tok(idx) + s.pos(torch.arange(idx.shape[1]))


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__(); s.h = h
        s.ln1, s.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.qkv, s.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(s, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, s.h, d // s.h).transpose(1, 2) for z in s.qkv(s.ln1(x)).split(d, 2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // s.h)
        att = att.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        x = x + s.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))


class Head(nn.Module):
    def __init__(s, d):
        super().__init__(); s.ln, s.head = nn.LayerNorm(d), nn.Linear(d, 256, bias=False)
    def forward(s, x):
        return s.head(s.ln(x))


def median_idle(pipe, x, y, loss):
    idle = []
    for _ in range(steps):
        pipe.step(x, y, loss)
        c = pipe.counters
        idle.append(1 - c["busy_seconds"] / c["step_seconds"])
    return statistics.median(idle[2:])


if mode == "bubble":
    for kind in ("simple", "interleaved"):
        for m in (4, 8):
            torch.manual_seed(0)
            layers = [nn.Sequential(nn.Linear(512, 512), nn.Tanh()) for _ in range(8)]
            pipe = Pipeline(layers, mesh, microbatches=m, schedule=kind, partition=[4])
            x = torch.randn(128 * m, 512)
            idle = median_idle(pipe, x, x, lambda o, t: F.mse_loss(o, t))
            theory = 1 / (m + 1)
            every = [None, None]
            dist.all_gather_object(every, idle)
            if dist.get_rank() == 0:
                for s, v in enumerate(every):
                    print(f"bubble {kind} {m} {s} {v:.3f} {theory:.3f} "
                          f"{'ok' if v <= theory + 0.05 else 'ABOVE'}", flush=True)
else:
    torch.manual_seed(0)
    d, t = 128, 128
    model = nn.Sequential(Emb(d, t), *[Block(d, 4) for _ in range(4)], Head(d))
    pipe = Pipeline(model, mesh, microbatches=8, schedule="interleaved", partition=[3])
    opt = torch.optim.AdamW([p for p in pipe.parameters()], lr=3e-4)
    g = torch.Generator().manual_seed(1)
    times = []
    for step in range(steps):
        data = torch.randint(0, 256, (16, t + 1), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        pipe.step(data[:, :-1], data[:, 1:], lambda o, y: F.cross_entropy(o.reshape(-1, 256), y.reshape(-1)))
        opt.step()
        times.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        print("python_step " + " ".join(f"{s:.4f}" for s in times[2:]), flush=True)
dist.destroy_process_group()
EOF
py() { OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- /usr/bin/python3 -u "$work/bench.py" "$@"; }
cxx() {  # heft-train's step seconds from its per-step tokens_per_s (2048 tokens per step)
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
    --batch_size 16 --max_steps "$steps" --lr_schedule constant --eval false --log_every 1 \
    --partitions 2 --microbatches 8 --pipeline interleaved |
    awk '/ step=[0-9]+ epoch=/ { for (i = 1; i <= NF; i++) if ($i ~ /^step=/) { sub(/step=/, "", $i); n = $i }
                              else if ($i ~ /^tokens_per_s=/) { sub(/tokens_per_s=/, "", $i); if (n > 2) printf "%.4f ", 2048 / $i } }'
}
stats() {  # "median worst" of the numbers on stdin
  tr ' ' '\n' | grep . | sort -g |
    awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f", m, v[NR] }'
}
echo "# pipeline_python: $(date -u +%Y-%m-%dT%H:%MZ); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $("$build/memory_bandwidth_bench" --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
echo "# bubble schedule m stage idle_fraction theory within_theory+0.05"
py bubble "$steps" | sed -n 's/.*bubble /bubble /p'
echo "# step round python_median_s python_worst_s cxx_median_s cxx_worst_s python/cxx(median)"
i=1
while [ "$i" -le "$rounds" ]; do
  p=$(py gpt "$steps" | sed -n 's/.*python_step //p' | stats)
  c=$(cxx | stats)
  set -- $p $c
  echo "step $i $1 $2 $3 $4 $(awk -v a="$1" -v b="$3" 'BEGIN { printf "%.2f", a / b }')"
  i=$((i + 1))
done
