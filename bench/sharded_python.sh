#!/usr/bin/env bash
# heft.torch.parallel.ShardedDataParallel against torch's DDP over the heft backend, on the
# plain-PyTorch GPT of examples/gpt_sharded.py (4 blocks of width 128, byte vocabulary, tied
# head, AdamW, global batch 16 x 128 tokens), one run each at 2 and 4 ranks, one thread per
# rank: tokens/s of all ranks (after 2 warm-up steps), each rank's training state
# (parameters + gradients + AdamW state, bytes) and peak RSS. Targets (issue 27): sharded
# state = DDP's / N (+ padding; a unit's gathered buffer lives only during its step), and
# sharded tokens/s >= 0.9 x DDP's. Prints the machine (CPU, memcpy GB/s) first.
#
# --memory: a wider GPT (8 blocks of width 512, 25 M parameters, batch 4 x 64, 4 steps),
# where the training state, not torch itself, dominates each rank's peak RSS.
#
#   bench/sharded_python.sh [--steps 30] [--n_layer 4] [--n_embd 128] [--memory]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=30 LAYERS=4 WIDTH=128 BATCH=16 BLOCK=128
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --n_layer) LAYERS=$2; shift 2 ;;
    --n_embd) WIDTH=$2; shift 2 ;;
    --memory) STEPS=4 LAYERS=8 WIDTH=512 BATCH=4 BLOCK=64; shift ;;
    *) echo "usage: $0 [--steps N] [--n_layer L] [--n_embd D] [--memory]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft PY=.venv/bin/python
[[ -x $HEFT && -f build/python/heft/torch/sharded.py ]] || { echo "$0: no build with the Python package: build heft and heft_python_c10d first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'), $(free -g | awk '/Mem:/{print $2}') GiB; torch $($PY -c 'import torch; print(torch.__version__)')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  steps=$STEPS n_layer=$LAYERS n_embd=$WIDTH batch=${BATCH}x$BLOCK"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
run() {  # $1 ranks, $2 strategy -> "tokens_per_s state_bytes peak_rss_mb" (rank 0)
  if ! OMP_NUM_THREADS=1 $HEFT run -n "$1" -- $PY -u examples/gpt_sharded.py \
      --strategy "$2" --steps "$STEPS" --n_layer "$LAYERS" --n_embd "$WIDTH" --n_head 4 \
      --batch_size "$BATCH" --block_size "$BLOCK" --log_every 100000 >"$LOG" 2>&1; then
    echo "sharded_python: $1 ranks, $2 failed:" >&2
    tail -20 "$LOG" >&2
  fi
  awk '/^\[rank 0\] final: rank=0 / { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "%s %s %s", v["tokens_per_s"], v["state_bytes"], v["peak_rss_mb"] }' "$LOG"
}
echo
echo "| ranks | strategy | tokens/s | state bytes per rank | state / DDP's | tokens/s / DDP's | peak RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in 2 4; do
  read -r dt ds dr <<<"$(run "$n" ddp)"
  read -r st ss sr <<<"$(run "$n" sharded)"
  echo "| $n | ddp | $dt | $ds | 1.00 | 1.00 | $dr |"
  echo "| $n | sharded | $st | $ss | $(awk -v a="$ss" -v b="$ds" 'BEGIN{printf "%.3f", a/b}') | $(awk -v a="$st" -v b="$dt" 'BEGIN{printf "%.2f", a/b}') | $sr |"
done
