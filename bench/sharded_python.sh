#!/usr/bin/env bash
# heft.torch.parallel.ShardedDataParallel against torch's DDP over the heft backend and
# torch's FSDP2 (`fully_shard` on each block, then the root) on the Gloo backend and on heft's
# (fsdp2_heft: the same script with --backend heft), on the
# plain-PyTorch GPT of examples/gpt_sharded.py (4 blocks of width 128, byte vocabulary, tied
# head, AdamW, global batch 16 x 128 tokens, seed 0: all three start from the same weights),
# at 2 and 4 ranks, one thread per rank. --rounds times per rank count, the order of the
# four rotating each round (round 1: ddp sharded fsdp2 fsdp2_heft, round 2: sharded fsdp2
# fsdp2_heft ddp, ...),
# so that none always runs first or last on a shared machine. Reports rank 0's figures:
# tokens/s of all ranks (after 2 warm-up steps), its training state (parameters + gradients
# + AdamW state, bytes) and peak RSS; each run as it ends, then per strategy the median and
# the worst round (fewest tokens/s, most RSS), then heft sharded against FSDP2: the ratio
# of the medians and the worst round's ratio (each round's heft run against that round's
# FSDP2 run). Targets (issue 27): sharded state = DDP's / N (+ padding; a unit's gathered
# buffer lives only during its step), and sharded tokens/s >= 0.9 x DDP's. Prints the
# machine (CPU, torch, memcpy GB/s) first.
#
# --memory: a wider GPT (8 blocks of width 512, 25 M parameters, batch 4 x 64, 4 steps),
# where the training state, not torch itself, dominates each rank's peak RSS. FSDP2 builds
# the whole model on every rank before sharding it (heft's deferred_init does not), a
# transient of DDP's parameter bytes that the ranks' steady state exceeds here.
#
#   bench/sharded_python.sh [--steps 30] [--rounds 3] [--n_layer 4] [--n_embd 128] [--memory]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=30 ROUNDS=3 LAYERS=4 WIDTH=128 BATCH=16 BLOCK=128
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --n_layer) LAYERS=$2; shift 2 ;;
    --n_embd) WIDTH=$2; shift 2 ;;
    --memory) STEPS=4 LAYERS=8 WIDTH=512 BATCH=4 BLOCK=64; shift ;;
    *) echo "usage: $0 [--steps N] [--rounds R] [--n_layer L] [--n_embd D] [--memory]" >&2; exit 2 ;;
  esac
done
[[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "$0: --rounds $ROUNDS: expected 1 to 99" >&2; exit 2; }
HEFT=build/heft PY=.venv/bin/python
[[ -x $HEFT && -f build/python/heft/torch/parallel/sharded/__init__.py ]] || { echo "$0: no build with the Python package: build heft and heft_python_c10d first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'), $(free -g | awk '/Mem:/{print $2}') GiB; torch $($PY -c 'import torch; print(torch.__version__)')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  steps=$STEPS n_layer=$LAYERS n_embd=$WIDTH batch=${BATCH}x$BLOCK rounds=$ROUNDS; load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
LOG=$(mktemp) RESULTS=$(mktemp)
trap 'rm -f "$LOG" "$RESULTS"' EXIT
run() {  # $1 ranks, $2 side -> "tokens_per_s state_bytes peak_rss_mb" (rank 0), or nothing
  local strategy=$2 backend=()
  [[ $2 == fsdp2_heft ]] && strategy=fsdp2 backend=(--backend heft)
  if ! OMP_NUM_THREADS=1 $HEFT run -n "$1" -- $PY -u examples/gpt_sharded.py \
      --strategy "$strategy" "${backend[@]}" --steps "$STEPS" --n_layer "$LAYERS" --n_embd "$WIDTH" --n_head 4 \
      --batch_size "$BATCH" --block_size "$BLOCK" --log_every 100000 >"$LOG" 2>&1; then
    echo "sharded_python: $1 ranks, $2 failed:" >&2
    tail -20 "$LOG" >&2
  fi
  awk '/^\[rank 0\] final: rank=0 / { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "%s %s %s", v["tokens_per_s"], v["state_bytes"], v["peak_rss_mb"] }' "$LOG"
}
SIDES=(ddp sharded fsdp2 fsdp2_heft)
echo
echo "# each run: ranks round strategy tokens/s state_bytes peak_rss_mib"
for n in 2 4; do
  for r in $(seq "$ROUNDS"); do
    for i in 0 1 2 3; do
      s=${SIDES[$(( (r - 1 + i) % 4 ))]}
      read -r t b m <<<"$(run "$n" "$s")" || true
      [[ -n ${m:-} ]] || { echo "# $n $r $s failed"; continue; }
      echo "# $n $r $s $t $b $m"
      echo "$n $r $s $t $b $m" >>"$RESULTS"
    done
  done
done
echo
$PY - "$RESULTS" "$ROUNDS" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (ranks, strategy) -> {round: (tokens/s, state, rss)}
for line in open(sys.argv[1]):
    n, r, s, t, b, m = line.split()
    runs[int(n), s][int(r)] = (float(t), int(b), float(m))
rounds = sys.argv[2]
print(f"# per strategy, {rounds} rounds: the median and the worst round (fewest tokens/s, most RSS)")
print("| ranks | strategy | tokens/s median | worst | tokens/s / DDP's | state bytes per rank "
      "| state / DDP's | peak RSS MiB median | worst |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
def stats(key):
    v = runs.get(key, {}).values()
    if not v:
        return None
    t, b, m = zip(*v)
    return statistics.median(t), min(t), max(b), statistics.median(m), max(m)
for n in (2, 4):
    ddp = stats((n, "ddp"))
    for s in ("ddp", "sharded", "fsdp2", "fsdp2_heft"):
        x = stats((n, s))
        if x is None:
            print(f"| {n} | {s} | failed | | | | | | |")
            continue
        rt = f"{x[0] / ddp[0]:.2f}" if ddp else "-"
        rb = f"{x[2] / ddp[2]:.3f}" if ddp else "-"
        print(f"| {n} | {s} | {x[0]:.0f} | {x[1]:.0f} | {rt} | {x[2]} | {rb} | {x[3]:.0f} | {x[4]:.0f} |")
print()
for mine, peer, title in (("sharded", "fsdp2", "heft sharded against torch FSDP2 on Gloo"),
                          ("sharded", "fsdp2_heft", "heft sharded against torch FSDP2 on heft"),
                          ("fsdp2_heft", "fsdp2", "torch FSDP2 on heft against FSDP2 on Gloo (the same script)")):
  print()
  print(f"# {title}: medians, their ratio, and the worst round's ratio (each round's run against "
        "that round's peer run)")
  print("| ranks | tokens/s | peer tokens/s | ratio | worst round "
        "| peak RSS MiB | peer peak RSS MiB | ratio | worst round |")
  print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
  for n in (2, 4):
    h, f = runs.get((n, mine), {}), runs.get((n, peer), {})
    both = sorted(set(h) & set(f))
    if not both:
        print(f"| {n} | failed | | | | | | | |")
        continue
    ht, hm = statistics.median(h[r][0] for r in h), statistics.median(h[r][2] for r in h)
    ft, fm = statistics.median(f[r][0] for r in f), statistics.median(f[r][2] for r in f)
    wt = min(h[r][0] / f[r][0] for r in both)  # heft's worst: fewest tokens/s, most RSS
    wm = max(h[r][2] / f[r][2] for r in both)
    print(f"| {n} | {ht:.0f} | {ft:.0f} | {ht / ft:.2f} | {wt:.2f} | {hm:.0f} | {fm:.0f} "
          f"| {hm / fm:.2f} | {wm:.2f} |")
EOF
