#!/usr/bin/env bash
# heft.torch.parallel.auto_layout's predicted step time against the Python strategies measured
# (bench/auto_layout_python.py: a small nn.Sequential planned on 2 ranks of this host, then run
# as DistributedDataParallel, ShardedDataParallel and Pipeline), with the machine (CPU, cores,
# memcpy GB/s) and the load average before and after: the machine is shared, a loaded figure
# is not a verdict.
#   bench/auto_layout_python.sh [--blocks 8] [--width 512] [--batch 64] [--steps 8]
# HEFT_BIN=DIR runs DIR/heft and DIR/python (a copy, while others rebuild build/).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${HEFT_BIN:-build}
[[ -x $BIN/heft && -d $BIN/python/heft ]] || { echo "$0: build heft and heft_python_c10d first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  2 ranks (heft run -n 2), OMP_NUM_THREADS=1; $*"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
OMP_NUM_THREADS=1 PYTHONPATH=$BIN/python "$BIN/heft" run -n 2 --no-prefix -- \
  .venv/bin/python -u bench/auto_layout_python.py "$@"
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
