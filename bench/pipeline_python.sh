#!/bin/sh
# heft.torch.parallel.Pipeline (the user's own PyTorch model on heft's C++ schedules and
# run_stage) on 2 ranks, one thread each:
#  1. bubble: 8 synthetic layers (Linear 512 -> 512 + tanh, 128 rows per micro-batch) on
#     2 stages of 4, simple and interleaved, m = 4 and 8, in two variants:
#       equal  a first layer (InputGrad, no parameters) makes the input a leaf that requires
#              grad, so the first stage computes its input's gradient as every other stage
#              does: the stages do the same work, as the theory assumes;
#       plain  without it: the first stage's backward skips its first layer's input gradient
#              (about 1/8 of its backward here), so it idles while the last stage finishes
#              each backward, on top of the schedule's bubble.
#     Per stage, medians of steps 3..STEPS: idle, the stage's share of the step not in
#     compute, 1 - busy / makespan, where busy is its forward and backward seconds and the
#     makespan the first stage's run_stage seconds (the first stage runs the step's first
#     forward and its last backward; the stages enter run_stage together, the previous
#     step's loss broadcast lining them up), so every stage is measured over one window,
#     as the theory counts; nothing outside run_stage (the loss broadcast, the optimizer) is
#     in it. Beside it: the same in the step with the smallest makespan (the one least
#     disturbed by other work on a shared machine), own_window (1 - busy / the stage's own
#     run_stage seconds, the runtime's idle fraction), the stage's forward and backward ms
#     per micro-batch, the simulated idle (heft's C++ simulator run with those measured
#     costs: the schedule's idle for the stages as they are), and the theory (p-1)/(m+p-1);
#     "ok" when within theory + 0.05.
#     Then the same stages' forward and backward CPU time per micro-batch in one process
#     (what other work on the machine changes least) and each stage's idle by heft's
#     simulator with those costs: what the schedule gives on a quiet machine.
#  2. the same columns for heft-train's C++ pipeline (its GPT below, interleaved, m = 8,
#     its summary's busy, forward and run_stage seconds over all STEPS steps).
#  3. step time: heft-train's GPT (n_layer 4, n_embd 128, 4 heads, block 128, untied head)
#     written in plain PyTorch as a sequence (embeddings, 4 blocks, head), split after block 1
#     as heft-train splits it, interleaved, 8 micro-batches, 16 x 128 bytes per step: the
#     Python step's seconds (zero_grad + pipe.step + AdamW, rank 0) beside heft-train's C++
#     pipeline on the same layout (its per-step tokens_per_s), median, worst and fastest of
#     steps 3..STEPS (the fastest: the step least disturbed on a shared machine); and each
#     stage's CPU milliseconds per step, median of steps 3..STEPS (the process's CPU time:
#     in Python over the same span, in heft-train its summary's step_cpu_ms, Pipelined::step
#     from start to end), the work each side does, which waiting for a core on a shared
#     machine does not change. --rounds rounds alternated; then the median and the worst of
#     the rounds' ratios.
#
#  4. torch.distributed.pipelining (torch's PipelineStage built by hand from the layers of the
#     GPT of 3., torch's schedules, Gloo) beside heft's Pipeline (heft's C++ schedules, heft
#     backend), the same model, 8 micro-batches, 16 x 128 tokens per step, STEPS steps, 2 ranks:
#       gpipe        torch ScheduleGPipe            heft schedule="simple"        split after block 1
#       1f1b         torch Schedule1F1B             heft schedule="interleaved"   split after block 1
#       interleaved  torch ScheduleInterleaved1F1B  heft schedule="interleaved", virtual_stages=2:
#                    4 chunks (embeddings + block 0 | block 1 | block 2 | block 3 + head), rank r
#                    holding chunks r and r + 2 on both sides
#     A step is zero_grad + the schedule's step + AdamW on rank 0, as in 3., with the loss of
#     the batch on rank 0 in it on both sides (heft's step returns it; torch's last stage
#     broadcasts the mean of its micro-batch losses). Each side's defaults otherwise: heft's
#     1F1B lets stages + 2 micro-batches be in flight, torch's stages - rank. Per round, each
#     schedule's tokens per second from the median step of steps 3..STEPS on each side and
#     the ratio heft/torch (above 1: heft faster); the sides alternate which runs first, a
#     fresh model (seed 0) and the same batches for every schedule; then the median and the
#     lowest (heft's worst) round's ratio. Round 1 also checks that the two sides give the
#     same loss on step 1 (the forward) and step 2 (after one AdamW step on the gradients).
#
# usage: bench/pipeline_python.sh [--rounds N] [BUILD_DIR]
#   (default build; STEPS=20 steps per run; --rounds: the rounds of 3. and 4., default 3)
set -eu
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) [ $# -ge 2 ] || { echo "pipeline_python: --rounds needs a number" >&2; exit 2; }
              rounds=$2; shift 2 ;;
    --rounds=*) rounds=${1#--rounds=}; shift ;;
    -*) echo "pipeline_python: unknown option $1 (usage: [--rounds N] [BUILD_DIR])" >&2; exit 2 ;;
    *) break ;;
  esac
done
case $rounds in ''|*[!0-9]*|0) echo "pipeline_python: --rounds $rounds: expected a whole number from 1 to 100" >&2; exit 2 ;; esac
[ "$rounds" -le 100 ] || { echo "pipeline_python: --rounds $rounds: at most 100" >&2; exit 2; }
build=${1:-build}
steps=${STEPS:-20}
case $steps in ''|*[!0-9]*|0|1|2) echo "pipeline_python: STEPS=$steps: expected a whole number of at least 3 (steps 3.. are timed)" >&2; exit 2 ;; esac
for f in "$build/heft" "$build/heft-train" "$build/python/heft/torch/parallel/pipeline/__init__.py"; do
  [ -e "$f" ] || { echo "pipeline_python: $f not found; build first" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/sim.py" <<'EOF'
# idle of every stage for measured costs: sim.py KIND M "F0 F1" "B0 B1" (seconds per action)
import sys
from heft.torch import _c10d
pp = _c10d.parallel.pipeline


def simulated_idle(schedule, forward, backward):
    s = pp.simulate(schedule, forward, backward)
    n = schedule.microbatches * schedule.virtual_stages
    return [1 - n * (f + b) / s["makespan"] for f, b in zip(forward, backward)]


if __name__ == "__main__":
    kind, m = sys.argv[1], int(sys.argv[2])
    f, b = ([float(v) for v in a.split()] for a in sys.argv[3:5])
    print(" ".join(f"{v:.3f}" for v in simulated_idle(pp.make_schedule(kind, len(f), m), f, b)))
EOF
cat > "$work/predict.py" <<'EOF'
# The synthetic stages' forward and backward CPU time per micro-batch in one process (thread
# CPU time, rounds interleaved, the median of rounds 11..60: what other work on the machine
# changes least), then each stage's idle by heft's simulator with those costs.
import statistics, time, torch, torch.nn as nn, torch.nn.functional as F
from heft.torch import _c10d
from sim import simulated_idle
torch.set_num_threads(1)
torch.manual_seed(0)
s0, s1 = (nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.Tanh()) for _ in range(4)])
          for _ in range(2))
x = torch.randn(128, 512)


def timed(f):
    t = time.thread_time()
    out = f()
    return out, time.thread_time() - t


cost = {k: [] for k in ("f0", "b0_plain", "b0_equal", "f1", "b1")}
for _ in range(60):
    y, f0 = timed(lambda: s0(x))
    _, b0 = timed(lambda: y.backward(torch.ones_like(y)))
    leaf = x.clone().requires_grad_()
    y = s0(leaf)
    _, b0e = timed(lambda: y.backward(torch.ones_like(y)))
    h = y.detach().requires_grad_()
    loss, f1 = timed(lambda: F.mse_loss(s1(h), x))
    _, b1 = timed(loss.backward)
    for k, v in zip(cost, (f0, b0, b0e, f1, b1)):
        cost[k].append(v)
med = {k: statistics.median(v[10:]) for k, v in cost.items()}
print("costs_ms " + " ".join(f"{k} {v * 1e3:.2f}" for k, v in med.items()))
for variant in ("equal", "plain"):
    for kind in ("simple", "interleaved"):
        for m in (4, 8):
            sc = _c10d.parallel.pipeline.make_schedule(kind, 2, m)
            idle = simulated_idle(sc, [med["f0"], med["f1"]], [med["b0_" + variant], med["b1"]])
            for s, v in enumerate(idle):
                print(f"predicted {variant} {kind} {m} {s} {v:.3f} {1 / (m + 1):.3f}")
EOF
cat > "$work/gpt.py" <<'EOF'
# heft-train's GPT (n_layer 4, n_embd 128, 4 heads, block 128, untied head) in plain PyTorch as
# a sequence of 6 layers (embeddings, 4 blocks, head), its batches and its loss: one model
# for the Python step of 3. and both sides of 4.
import math, torch, torch.nn as nn, torch.nn.functional as F
VOCAB, CTX, D, BATCH, MICROBATCHES = 256, 128, 128, 16, 8


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


def gpt():
    """The model, the same weights on every rank and in every call (seed 0)."""
    torch.manual_seed(0)
    return nn.Sequential(Emb(D, CTX), *[Block(D, 4) for _ in range(4)], Head(D))


def batches(steps):
    """(inputs, targets) of every step, (BATCH, CTX) token ids each, the same on every rank."""
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        data = torch.randint(0, VOCAB, (BATCH, CTX + 1), generator=g)
        yield data[:, :-1], data[:, 1:]


def loss_fn(logits, targets):  # the mean over the micro-batch
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))
EOF
cat > "$work/bench.py" <<'EOF'
import statistics, sys, time
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
import heft.torch  # noqa: F401
from heft.torch.parallel import DeviceMesh, Pipeline
from sim import simulated_idle
from gpt import batches, gpt, loss_fn

mode, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("heft", init_method="env://")
mesh = DeviceMesh(pipeline=2)


class InputGrad(nn.Module):
    def forward(s, x):
        return x.detach().requires_grad_()


def bubble(pipe, x, loss):
    """Per stage: (idle, idle in the fastest step, own-window idle, forward s, backward s
    per micro-batch), medians of steps 3..; on rank 0 only (None elsewhere)."""
    mine = []
    for _ in range(steps):
        pipe.step(x, x, loss)
        c = pipe.counters
        mine.append((c["busy_seconds"], c["forward_seconds"], c["step_seconds"]))
    every = [None] * pipe.stages
    dist.all_gather_object(every, mine[2:])
    if dist.get_rank() != 0:
        return None
    makespan = [row[2] for row in every[0]]
    fastest = makespan.index(min(makespan))
    med = statistics.median
    return [(med(1 - b / w for (b, _, _), w in zip(rows, makespan)),
             1 - rows[fastest][0] / makespan[fastest],
             med(1 - b / s for b, _, s in rows),
             med(f for _, f, _ in rows) / pipe.microbatches,
             med(b - f for b, f, _ in rows) / pipe.microbatches) for rows in every]


if mode == "bubble":
    for variant in ("equal", "plain"):
        for kind in ("simple", "interleaved"):
            for m in (4, 8):
                torch.manual_seed(0)
                layers = [nn.Sequential(nn.Linear(512, 512), nn.Tanh()) for _ in range(8)]
                first = [InputGrad()] if variant == "equal" else []
                pipe = Pipeline(first + layers, mesh, microbatches=m, schedule=kind,
                                partition=[len(first) + 4])
                x = torch.randn(128 * m, 512)
                rows = bubble(pipe, x, lambda o, t: F.mse_loss(o, t))
                if rows is None:
                    continue
                theory = 1 / (m + 1)
                sim = simulated_idle(pipe.schedule, [r[3] for r in rows], [r[4] for r in rows])
                verdict = lambda v: "ok" if v <= theory + 0.05 else "ABOVE"
                for s, (idle, fast, own, f, b) in enumerate(rows):
                    print(f"bubble {variant} {kind} {m} {s} {idle:.3f} {fast:.3f} {own:.3f} "
                          f"{f * 1e3:.2f} {b * 1e3:.2f} {sim[s]:.3f} {theory:.3f} "
                          f"{verdict(idle)} {verdict(fast)}", flush=True)
else:
    pipe = Pipeline(gpt(), mesh, microbatches=8, schedule="interleaved", partition=[3])
    opt = torch.optim.AdamW([p for p in pipe.parameters()], lr=3e-4)
    times, cpu = [], []
    for x, y in batches(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad()
        pipe.step(x, y, loss_fn)
        opt.step()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    every = [None, None]
    dist.all_gather_object(every, statistics.median(cpu[2:]))
    if dist.get_rank() == 0:
        print("python_step " + " ".join(f"{s:.4f}" for s in times[2:]), flush=True)
        print("python_cpu_ms " + " ".join(f"{1e3 * c:.2f}" for c in every), flush=True)
dist.destroy_process_group()
EOF
cat > "$work/vs_torch.py" <<'EOF'
# One side of 4.: vs_torch.py SIDE STEPS, under heft run -n 2. SIDE heft: heft's Pipeline on
# the heft backend; torch: torch.distributed.pipelining's PipelineStage (built by hand from
# the same layers) and schedules on Gloo. Every schedule in turn gets a fresh model (seed 0)
# and the same batches; rank 0 prints its loss on steps 1 and 2 and its step seconds
# (zero_grad + the schedule's step + AdamW, the batch's loss on rank 0) of steps 3..STEPS.
import sys, time
import torch, torch.distributed as dist, torch.nn as nn
from gpt import MICROBATCHES, batches, gpt, loss_fn

side, steps = sys.argv[1], int(sys.argv[2])
STAGES = 2
# name: (heft schedule, chunks per rank, first layer of each chunk after the first)
SCHEDULES = {"gpipe": ("simple", 1, [3]), "1f1b": ("interleaved", 1, [3]),
             "interleaved": ("interleaved", 2, [2, 3, 4])}


def heft_step(name):
    from heft.torch.parallel import DeviceMesh, Pipeline
    kind, v, cut = SCHEDULES[name]
    pipe = Pipeline(gpt(), DeviceMesh(pipeline=STAGES), microbatches=MICROBATCHES,
                    schedule=kind, virtual_stages=v, partition=cut)
    opt = torch.optim.AdamW(pipe.parameters(), lr=3e-4)

    def step(x, y):
        opt.zero_grad()
        loss = pipe.step(x, y, loss_fn)
        opt.step()
        return loss
    return step


def torch_step(name):
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                              ScheduleInterleaved1F1B)
    _, v, cut = SCHEDULES[name]
    layers = list(gpt())
    bounds = list(zip([0] + cut, cut + [len(layers)]))
    rank, parts = dist.get_rank(), STAGES * v
    stages = [PipelineStage(nn.Sequential(*layers[slice(*bounds[k])]), k, parts,
                            torch.device("cpu"))
              for k in range(rank, parts, STAGES)]  # part c * STAGES + rank, as heft's chunks
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B,
            "interleaved": ScheduleInterleaved1F1B}[name]
    schedule = kind(stages if v > 1 else stages[0], n_microbatches=MICROBATCHES,
                    loss_fn=loss_fn)
    opt = torch.optim.AdamW([p for s in stages for p in s.submod.parameters()], lr=3e-4)
    first, last = any(s.is_first for s in stages), any(s.is_last for s in stages)

    def step(x, y):
        opt.zero_grad()
        losses = []
        # x.contiguous(): the stage checks each micro-batch's strides against the first
        # step's, which it records as contiguous; the slice data[:, :-1] is not
        schedule.step(*([x.contiguous()] if first else []), target=y if last else None,
                      losses=losses if last else None, return_outputs=False)
        opt.step()
        total = torch.zeros(1, dtype=torch.float64)
        if last:
            total += torch.stack([l.detach().double() for l in losses]).mean()
        dist.broadcast(total, STAGES - 1)
        return total.item()
    return step


if side == "heft":
    import heft.torch  # noqa: F401 (registers the "heft" backend)
dist.init_process_group("heft" if side == "heft" else "gloo", init_method="env://")
for name in SCHEDULES:
    step = (heft_step if side == "heft" else torch_step)(name)
    seconds, loss = [], []
    for x, y in batches(steps):
        t0 = time.perf_counter()
        loss.append(step(x, y))
        seconds.append(time.perf_counter() - t0)
    if dist.get_rank() == 0:
        print(f"vs_torch {side} {name} loss {loss[0]!r} {loss[1]!r}", flush=True)
        print(f"vs_torch {side} {name} step_s " + " ".join(f"{s:.4f}" for s in seconds[2:]),
              flush=True)
    del step
    dist.barrier()
dist.destroy_process_group()
EOF
export PYTHONPATH="$work:$build/python${PYTHONPATH:+:$PYTHONPATH}"
py() { OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- .venv/bin/python -u "$work/bench.py" "$@"; }
train() {  # heft-train's GPT pipeline, 2 stages, interleaved, m = 8, logging every step
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
    --batch_size 16 --max_steps "$steps" --lr_schedule constant --eval false --log_every 1 \
    --partitions 2 --microbatches 8 --pipeline interleaved
}
steps_of() {  # heft-train's step seconds from its per-step tokens_per_s (2048 tokens per step)
  awk '/ step=[0-9]+ epoch=/ { for (i = 1; i <= NF; i++) if ($i ~ /^step=/) { sub(/step=/, "", $i); n = $i }
                              else if ($i ~ /^tokens_per_s=/) { sub(/tokens_per_s=/, "", $i); if (n > 2) printf "%.4f ", 2048 / $i } }'
}
stats() {  # "median worst" of the numbers on stdin ("median worst fastest" with an argument)
  tr ' ' '\n' | grep . | sort -g |
    awk -v all="${1:-}" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                           printf "%.4f %.4f", m, v[NR]; if (all != "") printf " %.4f", v[1] }'
}
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
vs() {  # one side of 4. (heft or torch), every schedule, into $work/vs_SIDE.out
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- .venv/bin/python -u "$work/vs_torch.py" "$1" "$steps" \
    > "$work/vs_$1.out" 2>&1 ||
    { echo "pipeline_python: the $1 side of the torch.distributed.pipelining comparison failed:" >&2
      tail -n 30 "$work/vs_$1.out" >&2; exit 1; }
}
echo "# pipeline_python: $(date -u +%Y-%m-%dT%H:%MZ); $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $("$build/memory_bandwidth_bench" --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
echo "# bubble variant schedule m stage idle idle_fastest_step own_window forward_ms backward_ms simulated theory within_theory+0.05(idle) (fastest)"
py bubble "$steps" | sed -n 's/.*bubble /bubble /p'
echo "# the same stages' costs as CPU time in one process (ms per micro-batch), and each stage's simulated idle with them"
echo "# predicted variant schedule m stage simulated_idle theory"
OMP_NUM_THREADS=1 .venv/bin/python "$work/predict.py"
echo "# heft-train (C++) gpt interleaved 8 stage idle own_window forward_ms backward_ms simulated theory"
out=$(train | grep "pipeline: stage=")
b0=$(echo "$out" | grep "stage=0 " | field busy_seconds); f0=$(echo "$out" | grep "stage=0 " | field forward_seconds)
b1=$(echo "$out" | grep "stage=1 " | field busy_seconds); f1=$(echo "$out" | grep "stage=1 " | field forward_seconds)
w0=$(echo "$out" | grep "stage=0 " | field step_seconds); w1=$(echo "$out" | grep "stage=1 " | field step_seconds)
n=$((steps * 8))
sim=$(.venv/bin/python "$work/sim.py" interleaved 8 "$(awk -v a="$f0" -v b="$f1" -v n=$n 'BEGIN { print a / n, b / n }')" \
  "$(awk -v a="$b0" -v c="$f0" -v b="$b1" -v d="$f1" -v n=$n 'BEGIN { print (a - c) / n, (b - d) / n }')")
set -- $sim
awk -v b0="$b0" -v f0="$f0" -v w0="$w0" -v b1="$b1" -v f1="$f1" -v w1="$w1" -v n=$n -v s0="$1" -v s1="$2" 'BEGIN {
  printf "heft-train interleaved 8 0 %.3f %.3f %.2f %.2f %s %.3f\n", 1 - b0 / w0, 1 - b0 / w0, f0 / n * 1e3, (b0 - f0) / n * 1e3, s0, 1 / 9
  printf "heft-train interleaved 8 1 %.3f %.3f %.2f %.2f %s %.3f\n", 1 - b1 / w0, 1 - b1 / w1, f1 / n * 1e3, (b1 - f1) / n * 1e3, s1, 1 / 9 }'
echo "# step round python_median_s python_worst_s python_fastest_s cxx_median_s cxx_worst_s cxx_fastest_s" \
  "python/cxx(median) python/cxx(fastest) load1 | cpu_ms_per_step python_stage0 python_stage1 cxx_stage0" \
  "cxx_stage1 python/cxx(stage0) python/cxx(stage1)"
i=1 ratios="" fast="" cpu0="" cpu1=""
while [ "$i" -le "$rounds" ]; do
  py gpt "$steps" > "$work/py.out"
  train > "$work/cxx.out"
  p=$(sed -n 's/.*python_step //p' "$work/py.out" | stats all)
  c=$(steps_of < "$work/cxx.out" | stats all)
  pc=$(sed -n 's/.*python_cpu_ms //p' "$work/py.out")
  cc=$(for s in 0 1; do grep "pipeline: stage=$s " "$work/cxx.out" | field step_cpu_ms; done | tr '\n' ' ')
  set -- $p $c $pc $cc
  r=$(awk -v a="$1" -v b="$4" 'BEGIN { printf "%.2f", a / b }')
  rf=$(awk -v a="$3" -v b="$6" 'BEGIN { printf "%.2f", a / b }')
  r0=$(awk -v a="$7" -v b="$9" 'BEGIN { printf "%.2f", a / b }')
  r1=$(awk -v a="$8" -v b="${10}" 'BEGIN { printf "%.2f", a / b }')
  ratios="$ratios $r" fast="$fast $rf" cpu0="$cpu0 $r0" cpu1="$cpu1 $r1"
  echo "step $i $1 $2 $3 $4 $5 $6 $r $rf $(cut -d' ' -f1 /proc/loadavg) | $7 $8 $9 ${10} $r0 $r1"
  i=$((i + 1))
done
echo "ratio python/cxx over $rounds rounds, median worst: step $(echo "$ratios" | stats)" \
  "| fastest step $(echo "$fast" | stats)" \
  "| cpu stage0 $(echo "$cpu0" | stats) stage1 $(echo "$cpu1" | stats)"
schedules="gpipe 1f1b interleaved"
heft_name() { case $1 in gpipe) echo simple ;; 1f1b) echo interleaved ;; *) echo interleaved,virtual_stages=2 ;; esac; }
echo "# torch.distributed.pipelining (PipelineStage by hand, Gloo) beside heft's Pipeline (heft backend):" \
  "the GPT of the step table above, 2 ranks, 8 micro-batches, 16 x 128 tokens per step, $steps steps"
i=1 order="heft torch"
: > "$work/vs_ratios"
while [ "$i" -le "$rounds" ]; do
  for side in $order; do vs "$side"; done
  if [ "$i" -eq 1 ]; then
    echo "# loss_check schedule step heft torch relative_difference within_1e-5 (step 1: the forward; step 2: after one AdamW step)"
    for name in $schedules; do
      set -- $(sed -n "s/.*vs_torch heft $name loss //p" "$work/vs_heft.out") \
             $(sed -n "s/.*vs_torch torch $name loss //p" "$work/vs_torch.out")
      [ $# -eq 4 ] || { echo "pipeline_python: no step 1 and 2 loss from both sides for $name" >&2; exit 1; }
      awk -v n="$name" -v h1="$1" -v h2="$2" -v t1="$3" -v t2="$4" 'function row(s, h, t,  d) {
          d = (h > t ? h - t : t - h) / (t < 0 ? -t : t)
          printf "loss_check %s %d %.9f %.9f %.2e %s\n", n, s, h, t, d, d <= 1e-5 ? "ok" : "DIFFERENT" }
        BEGIN { row(1, h1, t1); row(2, h2, t2) }'
    done
    echo "# vs_torch round schedule heft_schedule heft_tokens_per_s torch_tokens_per_s heft/torch" \
      "heft_median_s torch_median_s first_side load1 (tokens/s: 2048 / the median step of steps 3..$steps)"
  fi
  for name in $schedules; do
    h=$(sed -n "s/.*vs_torch heft $name step_s //p" "$work/vs_heft.out" | stats)
    t=$(sed -n "s/.*vs_torch torch $name step_s //p" "$work/vs_torch.out" | stats)
    [ -n "$h" ] && [ -n "$t" ] || { echo "pipeline_python: no step times from both sides for $name" >&2; exit 1; }
    set -- $h $t
    r=$(awk -v h="$1" -v t="$3" 'BEGIN { printf "%.2f", t / h }')
    echo "$name $r" >> "$work/vs_ratios"
    awk -v n="$name" -v k="$(heft_name "$name")" -v i="$i" -v h="$1" -v t="$3" -v r="$r" -v f="${order%% *}" \
      -v l="$(cut -d' ' -f1 /proc/loadavg)" \
      'BEGIN { printf "vs_torch %d %s %s %.0f %.0f %s %.4f %.4f %s %s\n", i, n, k, 2048 / h, 2048 / t, r, h, t, f, l }'
  done
  [ "$order" = "heft torch" ] && order="torch heft" || order="heft torch"
  i=$((i + 1))
done
echo "# ratio heft/torch (tokens per second) over $rounds rounds: schedule median lowest"
for name in $schedules; do
  echo "vs_torch_ratio $name $(sed -n "s/^$name //p" "$work/vs_ratios" | tr '\n' ' ' | stats all | awk '{ print $1, $3 }')"
done
