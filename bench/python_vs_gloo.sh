#!/usr/bin/env bash
# heft from PyTorch scripts against Gloo, in one run, alternating the sides each round:
#  1. all_reduce from Python on backend heft, against the same on Gloo and against `heft
#     bench` (C++, no binding): 2 and 4 ranks, 4 KiB to 64 MiB. Target: the binding costs at
#     most 10% of heft bench's bandwidth at 1 MiB and above (python_heft/heft_bench >= 0.9).
#  2. PyTorch DDP throughput with ../shared/peers/ddp_torch.py (CNN, Fashion-MNIST) and
#     gpt_torch.py (small GPT on fortunes), --backend heft against --backend gloo, 2 ranks.
#     Targets: heft >= 1.5x Gloo on the CNN, >= 1.2x on the GPT. Beside them the ceiling:
#     2 x one rank without communication, which no backend can pass.
# Prints the machine (CPU, memcpy GB/s) first, then markdown tables (medians of the rounds).
#
#   bench/python_vs_gloo.sh [--rounds 3] [--min 4K] [--max 64M] [--iters 20] [--skip-ddp]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 MIN=4K MAX=64M ITERS=20 DDP=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --skip-ddp) DDP=0; shift ;;
    *) echo "usage: $0 [--rounds R] [--min 4K] [--max 64M] [--iters N] [--skip-ddp]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft
PEERS=${HEFT_PEERS:-../shared/peers}
PY=/usr/bin/python3
[[ -x $HEFT && -f build/python/heft/torch/__init__.py ]] || { echo "$0: no build with the Python package: run ./setup.sh first" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')), $(free -g | awk '/Mem:/{print $2}') GiB; torch $($PY -c 'import torch; print(torch.__version__)')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS iters=$ITERS"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s %s: %.1f  ", (NR>1?"":""), a[2], $6/1e9}')"

for n in 2 4; do
  for r in $(seq "$ROUNDS"); do
    $HEFT run -n "$n" --no-prefix -- $PY bench/python_allreduce.py --backend heft --min "$MIN" \
      --max "$MAX" --iters "$ITERS" >"$OUT/py-heft-$n-$r"
    $HEFT bench allreduce --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" >"$OUT/heft-$n-$r"
    $HEFT run -n "$n" --no-prefix -- $PY bench/python_allreduce.py --backend gloo --min "$MIN" \
      --max "$MAX" --iters "$ITERS" >"$OUT/py-gloo-$n-$r"
  done
  echo
  echo "## all_reduce from Python, $n ranks, one host (median of $ROUNDS); python_heft/heft_bench is the share of heft bench's bandwidth the binding keeps (target >= 0.9 from 1 MiB)"
  $PY bench/compare_rows.py python_heft "$OUT"/py-heft-$n-* -- heft_bench "$OUT"/heft-$n-* -- gloo "$OUT"/py-gloo-$n-*
done

[[ $DDP == 1 ]] || exit 0
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
port=29700
for r in $(seq "$ROUNDS"); do
  for b in heft gloo; do
    PYTHONPATH=build/python $PY "$PEERS/ddp_torch.py" --ranks 2 --batch 64 --limit 12800 \
      --backend $b --port $((port++)) 2>/dev/null | grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2 >>"$OUT/cnn-$b"
    PYTHONPATH=build/python $PY "$PEERS/gpt_torch.py" --ranks 2 --steps 60 --batch 16 \
      --backend $b --port $((port++)) 2>/dev/null | grep -o 'final:.*tokens_per_s=[0-9.]*' | grep -o 'tokens_per_s=[0-9.]*' | cut -d= -f2 >>"$OUT/gpt-$b"
  done
done
# The ceiling: one rank with the same per-rank batch and no communication at all, times 2
# (what 2 ranks would reach if communication and sharing the machine cost nothing).
for r in $(seq "$ROUNDS"); do
  $PY "$PEERS/ddp_torch.py" --ranks 1 --batch 32 --limit 6400 --port $((port++)) 2>/dev/null |
    grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2 | awk '{print 2 * $1}' >>"$OUT/cnn-ceiling"
  $PY "$PEERS/gpt_torch.py" --ranks 1 --steps 60 --batch 8 --port $((port++)) 2>/dev/null |
    grep -o 'final:.*tokens_per_s=[0-9.]*' | grep -o 'tokens_per_s=[0-9.]*' | cut -d= -f2 |
    awk '{print 2 * $1}' >>"$OUT/gpt-ceiling"
done
echo
echo "## PyTorch DDP, 2 ranks, backend heft against gloo (median of $ROUNDS)"
echo "ceiling: 2 x one rank at the same per-rank batch without communication; ceiling/gloo bounds what any backend can gain over Gloo"
echo "| workload | heft | gloo | heft/gloo | target | ceiling | ceiling/gloo |"
echo "| --- | ---: | ---: | ---: | --- | ---: | ---: |"
for w in cnn gpt; do
  h=$(median <"$OUT/$w-heft"); g=$(median <"$OUT/$w-gloo"); c=$(median <"$OUT/$w-ceiling")
  unit=$([[ $w == cnn ]] && echo samples/s || echo tokens/s)
  target=$([[ $w == cnn ]] && echo '>= 1.5' || echo '>= 1.2')
  echo "| $w ($unit) | $h | $g | $(awk -v a="$h" -v b="$g" 'BEGIN{printf "%.2f", a/b}') | $target | $c | $(awk -v a="$c" -v b="$g" 'BEGIN{printf "%.2f", a/b}') |"
done
