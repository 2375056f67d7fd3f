# Sourced by bench/*_before_after.sh: the arguments every before/after benchmark takes and the
# machine header it prints. Sets `before`, `after` (build folders with heft, heft-train,
# memory_bandwidth_bench and python/heft), `rounds` (default: $1) and `workloads` (--workloads
# a,b: empty unless given, the script's own default then), exits 2 naming what is wrong, exports OMP_NUM_THREADS=1; before_after_header prints the machine (cores, CPU model,
# torch), memcpy GB/s at 1 MiB, the date, the builds, the rounds and the load.
# --before-env 'VAR=V VAR2=W': the before side runs with these variables set (the same build on
# both sides, a setting's before and after: e.g. the rules a measured choice replaced); the
# scripts that honour it run each command through `side_env SIDE` (allreduce, ddp).
#   source bench/before_after.sh DEFAULT_ROUNDS "$@"
rounds=$1
shift
before="" after="" workloads="" before_env=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --before-env) before_env=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    *) echo "usage: $0 --before DIR --after DIR [--rounds R] [--workloads a,b] [--before-env 'VAR=V ...']" >&2; exit 2 ;;
  esac
done
for b in "$before" "$after"; do
  [[ -n $b && -x $b/heft && -x $b/heft-train && -f $b/python/heft/torch/__init__.py ]] ||
    { echo "$(basename "$0" .sh): '$b' is not a build with heft, heft-train and python/heft" >&2; exit 2; }
done
for v in $before_env; do
  [[ $v == *=* ]] || { echo "$(basename "$0" .sh): --before-env: '$v' is not VAR=VALUE" >&2; exit 2; }
done
export OMP_NUM_THREADS=1

# `env` with the side's variables: `side_env before cmd...` runs cmd under --before-env's.
side_env() {
  local side=$1
  shift
  if [[ $side == before ]]; then env $before_env "$@"; else env "$@"; fi
}

before_after_header() {
  local py=${PYTHON:-.venv/bin/python}
  cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
  echo "# machine: $(getconf _NPROCESSORS_ONLN) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')); torch $($py -c 'import torch; print(torch.__version__)')"
  echo "# memcpy 1 MiB GB/s: $("$after/memory_bandwidth_bench" --benchmark_filter='BM_Memcpy/1048576$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{printf "%.1f", $6/1e9}')"
  echo "# date: $(date -u +%Y-%m-%dT%H:%MZ); before $before${before_env:+ with $before_env}, after $after; $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
}
