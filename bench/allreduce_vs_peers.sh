#!/usr/bin/env bash
# heft's allreduce against OpenMPI and Gloo, in one run, on the same sizes, alternating the
# three each round; then 2 simulated hosts x 2 ranks, hierarchical against the flat TCP
# ring; then this machine's memory bandwidth (memcpy, sum-into), the bound for shared
# memory. Prints one markdown table per comparison: median busbw of each and heft's ratios.
#
#   bench/allreduce_vs_peers.sh [--rounds 3] [--min 4K] [--max 64M] [--iters 20]
# Needs a build (./setup.sh) and the peer harnesses (HEFT_PEERS, default ../shared/peers).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 MIN=4K MAX=64M ITERS=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds R] [--min 4K] [--max 64M] [--iters N]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft
PEERS=${HEFT_PEERS:-../shared/peers}
PY=/usr/bin/python3
[[ -x $HEFT ]] || { echo "$0: $HEFT missing: run ./setup.sh first" >&2; exit 1; }
[[ -f $PEERS/allreduce_mpi.py ]] || { echo "$0: no peer harnesses in $PEERS (set HEFT_PEERS)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS iters=$ITERS"
port=29611
for n in 2 4; do
  for r in $(seq "$ROUNDS"); do
    $HEFT bench allreduce --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" >"$OUT/heft-$n-$r"
    mpirun --allow-run-as-root --oversubscribe -np "$n" $PY "$PEERS/allreduce_mpi.py" \
      --min "$MIN" --max "$MAX" --iters "$ITERS" >"$OUT/openmpi-$n-$r" 2>/dev/null
    $PY "$PEERS/allreduce_gloo.py" --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" \
      --port $((port++)) >"$OUT/gloo-$n-$r" 2>/dev/null
  done
  echo
  echo "## allreduce, $n ranks, one host (busbw GB/s, median of $ROUNDS)"
  $PY bench/compare_rows.py heft "$OUT"/heft-$n-* -- openmpi "$OUT"/openmpi-$n-* -- gloo "$OUT"/gloo-$n-*
done

for r in $(seq "$ROUNDS"); do
  $HEFT bench allreduce --ranks 4 --hosts 2 --min "$MIN" --max "$MAX" --iters "$ITERS" >"$OUT/hier-$r"
  HEFT_TRANSPORT=tcp $HEFT bench allreduce --ranks 4 --hosts 2 --algo ring --min "$MIN" \
    --max "$MAX" --iters "$ITERS" >"$OUT/flat-$r"
done
echo
echo "## allreduce, 2 simulated hosts x 2 ranks: hierarchical vs flat TCP ring (busbw GB/s, median of $ROUNDS)"
$PY bench/compare_rows.py hierarchical "$OUT"/hier-* -- flat_tcp_ring "$OUT"/flat-*

echo
echo "## memory bandwidth of one core (the shared-memory bound), GB/s of buffer processed"
build/memory_bandwidth_bench --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null |
  $PY -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if r and r[0].startswith("BM_")]
by = {}
for r in rows:
    kind, size = r[0].split("/")
    by.setdefault(int(size), {})[kind] = float(r[5]) / 1e9  # bytes_per_second
print("| bytes | memcpy | sum-into |")
print("| ---: | ---: | ---: |")
for size in sorted(by):
    row = by[size]
    print("| %d | %.1f | %.1f |" % (size, row.get("BM_Memcpy", 0), row.get("BM_SumInto", 0)))
'
