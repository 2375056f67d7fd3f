#!/usr/bin/env bash
# PyTorch DDP over the heft backend against Gloo and against the perfect-overlap ceiling,
# with the shared peer harness (../shared/peers/ddp_torch.py: the CNN on Fashion-MNIST,
# global batch 64, the first 12800 samples; gpt_torch.py: the small GPT on fortunes, global
# batch 16, 60 steps): --backend heft, --backend gloo, and the ceiling: as many one-rank
# runs at the same per-rank batch as there are ranks, at once, without communication (ranks
# x one rank's throughput: what the ranks would reach if communication cost nothing). All three alternate, --rounds times,
# in one invocation; prints every run, then per workload the medians, heft/gloo, heft/ceiling
# in the median and in the worst round (each round's heft run against that round's
# ceiling). Target (issue 29 item 6): heft/ceiling >= 0.90.
# With --heft-train, also the old comparison: heft-train's own CNN DDP against the peer's
# (gloo) CNN, 2 ranks. With --phases, only where a DDP step's time goes: the peer's CNN,
# 2 ranks, 80 steps per run, timed by heft's step profiler (heft.torch.profile: forward,
# backward, communication = from the last gradient computed, the first conv's weight, to the
# end of backward: what the all_reduces add after the gradients are done, optimizer), medians
# of steps 10-80 on rank 0, heft and gloo, ranks started as the peer harness starts them
# (free to run on any core) and under `heft run` (each bound to its own core).
#
# usage: bench/ddp_vs_torch.sh [--rounds 5] [--ranks 2] [--build build] [--heft-train] [--phases] [--no-header]
#        ROUNDS=3 bench/ddp_vs_torch.sh BUILD_DIR   (this script's first form: only the
#        heft-train comparison, printed as docs/performance-ddp.md recorded it)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5} ranks=2 build=build heft_train=0 header=1 phases=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --heft-train) heft_train=1; shift ;;
    --phases) phases=1; shift ;;
    --no-header) header=0; shift ;;
    -*) echo "usage: $0 [--rounds R] [--ranks N] [--build DIR] [--heft-train] [--phases] [--no-header] | BUILD_DIR" >&2; exit 2 ;;
    *) build=$1; heft_train=2; shift ;;
  esac
done
py=${PYTHON:-.venv/bin/python}
peers=${HEFT_PEERS:-../shared/peers}
[[ -f $build/python/heft/torch/__init__.py ]] || { echo "ddp_vs_torch: no Python package in $build/python; build first" >&2; exit 2; }
[[ -f $peers/ddp_torch.py && -f $peers/gpt_torch.py ]] || { echo "ddp_vs_torch: $peers/ddp_torch.py or gpt_torch.py not found" >&2; exit 2; }
(( 64 % ranks == 0 && 16 % ranks == 0 )) || { echo "ddp_vs_torch: --ranks must divide 16" >&2; exit 2; }
export OMP_NUM_THREADS=1 PYTHONPATH=$build/python
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
port=$((29700 + RANDOM % 200))

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
heft_train_vs_peer() {  # heft-train's CNN DDP against the peer's DDP on Gloo, 2 ranks
  echo "# ddp_vs_torch: cnn, 2 ranks, global batch 64, limit 12800, $rounds rounds; $(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# round impl samples_per_s"
  local ht_all="" pt_all="" h t hm tm
  for r in $(seq "$rounds"); do
    h=$("$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model cnn --batch_size 64 --limit 12800 \
      --lr 0.01 --momentum 0.9 --eval false --log_every 100000 | sed -n 's/.*final: .*samples_per_s=\([0-9.]*\).*/\1/p')
    echo "$r heft $h"
    t=$($py "$peers/ddp_torch.py" --ranks 2 --batch 64 --limit 12800 --threads 1 --port $((port++)) |
      sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1)
    echo "$r pytorch_ddp $t"
    ht_all="$ht_all $h"; pt_all="$pt_all $t"
  done
  hm=$(echo "$ht_all" | tr ' ' '\n' | grep . | median); tm=$(echo "$pt_all" | tr ' ' '\n' | grep . | median)
  echo "median heft=$hm pytorch_ddp=$tm ratio=$(awk -v a="$hm" -v b="$tm" 'BEGIN { printf "%.2f", a / b }')"
}
if [[ $heft_train == 2 ]]; then
  heft_train_vs_peer
  exit 0
fi

if [[ $header == 1 ]]; then
  cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
  echo "# machine: $(getconf _NPROCESSORS_ONLN) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')); torch $($py -c 'import torch; print(torch.__version__)')"
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $($build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f", a[2], $6/1e9}')"
fi
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  ddp_vs_torch: $ranks ranks, $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"

if [[ $phases == 1 ]]; then
  cat >"$out/phases.py" <<'PY'
import os, statistics, sys
sys.path.insert(0, os.environ["PEERS"])
import torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
import ddp_torch as peer
import heft.torch
from heft.torch.profile import StepProfiler
backend, steps = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1); torch.manual_seed(0)
dist.init_process_group(backend, init_method="env://")
r, n = dist.get_rank(), dist.get_world_size()
xtr, ytr = peer.load("train")
model = nn.parallel.DistributedDataParallel(peer.CNN())
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
prof = StepProfiler.from_env().activate()
# The first conv's weight gets its gradient last: from then on backward only waits.
model.module.c1.weight.register_hook(lambda g: prof.push("communication"))
per = 64 // n
for i in range(steps):
    prof.begin_step(i)
    with prof.phase("data"):
        b = torch.arange(i * 64 + r * per, i * 64 + r * per + per) % len(xtr)
        x, y = xtr[b], ytr[b]
    opt.zero_grad()
    with prof.phase("forward"):
        loss = F.cross_entropy(model(x), y)
    prof.push("backward")
    loss.backward()
    prof.pop(); prof.pop()  # communication, backward
    with prof.phase("optimizer"):
        opt.step()
    prof.end_step()
dist.destroy_process_group()
if r == 0:
    rows = [list(map(float, l.split()[2:])) for l in open(os.path.join(os.environ["HEFT_PROFILE_DIR"], "rank-0.steps"))][10:]
    m = [statistics.median(c[k] for c in rows) for k in range(6)]
    print(f"| {backend} | {os.environ['LAUNCH']} | {m[0]:.2f} | {m[2]:.2f} | {m[3]:.2f} | {m[4]:.3f} | {m[5]:.2f} | {64 / m[0] * 1e3:.0f} |")
PY
  echo "| backend | ranks started | step ms | forward | backward | communication | optimizer | samples/s |"
  echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  for r in $(seq "$rounds"); do
    for b in heft gloo; do
      mkdir -p "$out/p-$r-$b-free" "$out/p-$r-$b-bound"
      p=$((port++))
      for k in 0 1; do
        PEERS=$peers LAUNCH=free HEFT_PROFILE_DIR=$out/p-$r-$b-free MASTER_ADDR=127.0.0.1 MASTER_PORT=$p \
          RANK=$k WORLD_SIZE=2 $py "$out/phases.py" $b 80 &
      done
      wait
      PEERS=$peers LAUNCH="heft run" HEFT_PROFILE_DIR=$out/p-$r-$b-bound "$build/heft" run -n 2 --no-prefix -- \
        $py "$out/phases.py" $b 80
    done
  done
  exit 0
fi

cnn() {  # ranks global_batch limit backend
  $py "$peers/ddp_torch.py" --ranks "$1" --batch "$2" --limit "$3" --threads 1 --backend "$4" \
    --port $((port++)) 2>/dev/null | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1
}
gpt() {  # ranks global_batch backend
  $py "$peers/gpt_torch.py" --ranks "$1" --batch "$2" --steps 60 --threads 1 --backend "$3" \
    --port $((port++)) 2>/dev/null | sed -n 's/^final:.*tokens_per_s=\([0-9.]*\).*/\1/p' | tail -n 1
}
# The ceiling: $ranks one-rank trainings at the same per-rank batch, without communication,
# run at once (so they share the machine as the ranks do: on a machine shared with other
# sessions the kernel's autogroup gives one session's processes one share, so one rank run
# alone would get the share that all ranks split), their throughputs summed.
ceiling() {
  local w=$1 k
  shift
  for k in $(seq "$ranks"); do
    port=$((port + 1))  # each copy its own (the copies run in subshells)
    "$w" "$@" >"$out/ceiling-$k" &
  done
  wait
  cat "$out"/ceiling-* | awk '{s += $1} END {print s}'
}
lockstep() {  # the workload's function and its arguments, run with the null-sync DDP
  HEFT_BENCH_NULL_SYNC=1 PYTHONPATH=bench/null_sync:$PYTHONPATH "$@"
}
echo "# round workload heft gloo ceiling lockstep (ceiling: $ranks one-rank runs at once, summed; lockstep: heft with no gradient exchanged; samples/s for cnn, tokens/s for gpt)"
for r in $(seq "$rounds"); do
  h=$(cnn "$ranks" 64 12800 heft); g=$(cnn "$ranks" 64 12800 gloo)
  c=$(ceiling cnn 1 $((64 / ranks)) $((12800 / ranks)) gloo)
  l=$(lockstep cnn "$ranks" 64 12800 heft)
  echo "$r cnn $h $g $c $l" | tee -a "$out/cnn"
  h=$(gpt "$ranks" 16 heft); g=$(gpt "$ranks" 16 gloo)
  c=$(ceiling gpt 1 $((16 / ranks)) gloo)
  l=$(lockstep gpt "$ranks" 16 heft)
  echo "$r gpt $h $g $c $l" | tee -a "$out/gpt"
done
echo
echo "## PyTorch DDP over heft, $ranks ranks: against Gloo and the perfect-overlap ceiling (median of $rounds rounds; target heft/ceiling >= 0.90)"
echo "| workload | heft | gloo | heft/gloo | ceiling ($ranks one-rank runs) | heft/ceiling | worst round heft/ceiling | lockstep (no gradient exchanged) | heft/lockstep | worst round heft/lockstep | lockstep/ceiling |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for w in cnn gpt; do
  unit=$([[ $w == cnn ]] && echo samples/s || echo tokens/s)
  $py - "$out/$w" "$w ($unit)" <<'PY'
import statistics, sys
rows = [list(map(float, l.split()[2:6])) for l in open(sys.argv[1]) if len(l.split()) == 6]
h, g, c, l = (statistics.median(r[i] for r in rows) for i in range(4))
worst = min(r[0] / r[2] for r in rows)
worst_l = min(r[0] / r[3] for r in rows)
print(f"| {sys.argv[2]} | {h:.1f} | {g:.1f} | {h / g:.2f} | {c:.1f} | {h / c:.2f} | {worst:.2f} | {l:.1f} | {h / l:.2f} | {worst_l:.2f} | {l / c:.2f} |")
PY
done

[[ $heft_train == 1 ]] || exit 0
echo
heft_train_vs_peer
