#!/usr/bin/env bash
# heft from PyTorch scripts against Gloo, in one run, alternating the sides each round:
#  1. all_reduce from Python on backend heft, against `heft bench` (C++, no binding) and the
#     same Python on Gloo: 2 and 4 ranks, 4 KiB to 64 MiB. Target (issue 29): python_heft
#     busbw >= 0.95x heft bench's from 1 MiB, in the median and in the worst round. The
#     Python runs also time heft's own loop in the same processes, alternated with the Python
#     calls (python_allreduce.py --paired: "native"): `heft bench` runs in other processes,
#     minutes apart, and this host moves its vCPUs between near and far placements that run
#     2-3x apart, so python/native is the binding's cost and python/heft_bench is not only.
#  2. PyTorch DDP with the shared peer harness (bench/ddp_vs_torch.sh: CNN and GPT, --backend
#     heft against gloo, beside the perfect-overlap ceiling measured in the same run).
# Prints the machine (CPU, memcpy GB/s, load) first, then markdown tables.
#
#   bench/python_vs_gloo.sh [--rounds 5] [--min 4K] [--max 64M] [--iters 20] [--warmup 5] [--skip-ddp] [--waits]
# Each round first prints the host's placement of the two vCPUs (a cache line's round trip,
# build/memory_bandwidth_bench: near about 100 ns, far about 400; shared-memory collectives
# run 3-4x slower far), and python_heft's rows end with the path heft's allreduce took.
# --waits: after each table, python_heft's per-call cost per round (CPU and run-queue wait
# of the ranks' threads, switches, how the shared-memory waits ended: python_allreduce.py).
# --warmup: untimed calls per size before the timed ones, on every side alike (at 1 MiB on
# 4 ranks the first 100-150 calls of a size run slower, ~300 against ~240 us, on both heft
# sides: with the default 5 the 20 timed calls measure that warm-up).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=5 MIN=4K MAX=64M ITERS=20 WARMUP=5 DDP=1 WAITS=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --skip-ddp) DDP=0; shift ;;
    --waits) WAITS=--waits; shift ;;
    *) echo "usage: $0 [--rounds R] [--min 4K] [--max 64M] [--iters N] [--warmup N] [--skip-ddp] [--waits]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft
PY=.venv/bin/python
[[ -x $HEFT && -f build/python/heft/torch/__init__.py ]] || { echo "$0: no build with the Python package: run ./setup.sh first" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(getconf _NPROCESSORS_ONLN) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')), $(free -g | awk '/Mem:/{print $2}') GiB; torch $($PY -c 'import torch; print(torch.__version__)')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS iters=$ITERS warmup=$WARMUP  load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"

placement() { build/memory_bandwidth_bench --benchmark_filter=RoundTrip 2>/dev/null | awk '/RoundTrip/{print $2 " " $3}'; }
for n in 2 4; do
  echo
  for r in $(seq "$ROUNDS"); do
    echo "# $n ranks, round $r: cache-line round trip $(placement), load $(cut -d' ' -f1 /proc/loadavg)"
    $HEFT run -n "$n" --no-prefix -- $PY bench/python_allreduce.py --backend heft --min "$MIN" \
      --max "$MAX" --iters "$ITERS" --warmup "$WARMUP" $WAITS >"$OUT/py-heft-$n-$r"
    $HEFT run -n "$n" --no-prefix -- $PY bench/python_allreduce.py --backend heft --min "$MIN" \
      --max "$MAX" --iters "$ITERS" --warmup "$WARMUP" --paired "$OUT/native-$n-$r" >"$OUT/py-paired-$n-$r"
    $HEFT bench allreduce --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" --warmup "$WARMUP" >"$OUT/heft-$n-$r"
    $HEFT run -n "$n" --no-prefix -- $PY bench/python_allreduce.py --backend gloo --min "$MIN" \
      --max "$MAX" --iters "$ITERS" --warmup "$WARMUP" >"$OUT/py-gloo-$n-$r"
  done
  rounds=$(seq "$ROUNDS")
  echo
  echo "## all_reduce from Python, $n ranks, one host (median of $ROUNDS rounds, every size)"
  $PY bench/compare_rows.py python_heft "$OUT"/py-heft-$n-* -- heft_bench "$OUT"/heft-$n-* -- gloo "$OUT"/py-gloo-$n-*
  echo
  echo "## $n ranks from 1 MiB: python_heft/heft_bench, median and worst round (target >= 0.95); python/native: paired in the same processes (5 alternations a size, each side's median)"
  $PY bench/python_allreduce.py summarize --from 1M $(for r in $rounds; do echo "$OUT/py-heft-$n-$r"; done) -- \
    $(for r in $rounds; do echo "$OUT/heft-$n-$r"; done) -- $(for r in $rounds; do echo "$OUT/py-gloo-$n-$r"; done) -- \
    $(for r in $rounds; do echo "$OUT/py-paired-$n-$r"; done) -- $(for r in $rounds; do echo "$OUT/native-$n-$r"; done)
  if [[ -n $WAITS ]]; then
    echo
    echo "## python_heft, $n ranks: per call, summed over the ranks (each round; the row's size above its line)"
    for r in $rounds; do echo "# round $r"; grep -v '^# \(impl\|bytes\)' "$OUT/py-heft-$n-$r"; done
  fi
done

[[ $DDP == 1 ]] || exit 0
echo
bench/ddp_vs_torch.sh --rounds "$ROUNDS" --no-header
