#!/usr/bin/env bash
# The profiler's cost on the main job: examples/fashion-mnist.yaml (2 hosts x 2 workers,
# heft-train, CNN) with the profiler on (system sampling every second, step timings, collective
# traces, the default rules) against `profiler: {enabled: false}, rules: []`, alternating the
# two each round. Reports each run's samples/s (the trainer's final line, rank 0) and the
# ratio of the medians. Target: on >= 97% of off.
#
#   bench/profile_overhead.sh [--rounds 3] [--epochs 1]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 EPOCHS=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds R] [--epochs E]" >&2; exit 2 ;;
  esac
done
[[ -x build/heft && -x build/heft-train ]] || { echo "$0: run ./setup.sh first" >&2; exit 1; }
export HEFT_HOME=$(mktemp -d)
trap 'rm -rf "$HEFT_HOME"' EXIT

cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS epochs=$EPOCHS"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"

run() {  # run NAME ON|OFF -> samples/s
  local extra=()
  [[ $2 == off ]] && extra=(--set profiler.enabled=false --set 'rules=[]')
  build/heft train examples/fashion-mnist.yaml --name "$1" --set hyperparameters.epochs="$EPOCHS" \
    "${extra[@]}" > "$HEFT_HOME/$1.out" 2>&1
  grep -o 'final: .*samples_per_s=[0-9.]*' "$HEFT_HOME/$1.out" | grep -o 'samples_per_s=[0-9.]*' | cut -d= -f2
}

on=() off=()
echo "| round | profiler on samples/s | profiler off samples/s |"
echo "| --- | --- | --- |"
for r in $(seq "$ROUNDS"); do
  if (( r % 2 )); then a=$(run "on-$r" on); b=$(run "off-$r" off); else b=$(run "off-$r" off); a=$(run "on-$r" on); fi
  on+=("$a") off+=("$b")
  echo "| $r | $a | $b |"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END{print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
m_on=$(median "${on[@]}") m_off=$(median "${off[@]}")
echo
echo "median on $m_on, off $m_off samples/s: on/off = $(awk -v a="$m_on" -v b="$m_off" 'BEGIN{printf "%.3f", a/b}') (target >= 0.97)"
echo "profiled run's findings: $(build/heft describe on-1 | sed -n '/^Findings/,$p' | tr '\n' ' ')"
