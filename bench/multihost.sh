#!/usr/bin/env bash
# Allreduce across real (namespace) hosts: tests/support/netns_hosts.sh makes 2 hosts whose
# links are shaped to each rate, and with 2 ranks a host this prints, side by side in one run,
# heft's automatic choice (which measures the hierarchical form against the flat ring per
# size on these links; the form it ran is shown), heft's hierarchical allreduce, heft's flat
# TCP ring (all through `heft run --launcher mpirun` and `heft bench --worker`) and OpenMPI's own MPI_Allreduce (../shared/peers/
# allreduce_mpi.py) launched by the same mpirun over the same hosts. With --main-job, also the
# main job's samples/s on the 2 namespace hosts (launcher mpirun) against 2 simulated hosts.
# Needs root. Prints the machine (CPU, memcpy GB/s) first.
#
#   bench/multihost.sh [--rates "1gbit 10gbit"] [--min 4K] [--max 64M] [--iters 10] [--main-job]
set -euo pipefail
cd "$(dirname "$0")/.."
RATES="1gbit 10gbit" MIN=4K MAX=64M ITERS=10 MAIN=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rates) RATES=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --main-job) MAIN=1; shift ;;
    *) echo "usage: $0 [--rates \"1gbit 10gbit\"] [--min 4K] [--max 64M] [--iters N] [--main-job]" >&2; exit 2 ;;
  esac
done
HOSTS=tests/support/netns_hosts.sh
$HOSTS check >/dev/null || { $HOSTS check; exit 1; }
trap '$HOSTS down --prefix hbench' EXIT
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')), $(free -g | awk '/Mem:/{print $2}') GiB"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  2 namespace hosts x 2 ranks, iters=$ITERS"
echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(65536|1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
HF=$(mktemp)
printf "10.79.0.11\n10.79.0.12\n" > "$HF"
OPTS="--mca plm_rsh_agent $PWD/tests/support/netns_rsh.sh --mca oob_tcp_if_include 10.79.0.0/24"
export NETNS_PREFIX=hbench
for rate in $RATES; do
  $HOSTS up 2 --net 79 --prefix hbench --rate "$rate" >/dev/null 2>&1
  out=$(mktemp -d)
  for algo in auto hierarchical ring; do
    # auto measures afresh at each link rate: no record of an earlier rate's choice
    # (docs/comm.md, "Same result twice").
    HEFT_ALLREDUCE_CACHE=off build/heft run --launcher mpirun --hostfile "$HF" -n 2 \
      --mpi-options "$OPTS -x HEFT_ALLREDUCE_CACHE" -- \
      build/heft bench allreduce --worker --min "$MIN" --max "$MAX" --factor 4 --iters "$ITERS" --algo "$algo" \
      | grep -v '^#' > "$out/$algo"
  done
  mpirun --allow-run-as-root --hostfile "$HF" --map-by ppr:2:node -np 4 --bind-to none $OPTS \
    --mca btl_tcp_if_include 10.79.0.0/24 .venv/bin/python ../shared/peers/allreduce_mpi.py \
    --min "$MIN" --max "$MAX" --iters "$ITERS" | grep -v '^#' | awk 'NR==1 || 1' > "$out/mpi.all"
  # allreduce_mpi.py doubles the size each row; keep heft's rows (x4).
  echo
  echo "### $rate links: busbw GB/s (time us)"
  echo "| bytes | heft auto (form it ran) | heft hierarchical | heft flat ring | OpenMPI | hierarchical/ring | hierarchical/OpenMPI | auto/best form |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
  while read -r bytes t_h _ b_h _; do
    read -r _ t_r _ b_r _ < <(grep "^$bytes " "$out/ring")
    read -r _ t_a _ b_a p_a < <(grep "^$bytes " "$out/auto")
    read -r _ t_m _ b_m < <(grep "^$bytes " "$out/mpi.all" || echo "x 0 0 0")
    awk -v n="$bytes" -v th="$t_h" -v bh="$b_h" -v tr="$t_r" -v br="$b_r" -v tm="$t_m" -v bm="$b_m" \
      -v ta="$t_a" -v ba="$b_a" -v pa="${p_a%%(*}" \
      'BEGIN{printf "| %d | %.3f (%.0f) %s | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.2f | %s | %.2f |\n", n, ba, ta, pa, bh, th, br, tr, bm, tm, bh/br, (bm>0 ? sprintf("%.2f", bh/bm) : "-"), ba/(bh>br ? bh : br)}'
  done < "$out/hierarchical"
  rm -rf "$out"
  if (( MAIN )) && [[ $rate == "${RATES%% *}" ]]; then
    export HEFT_HOME=$(mktemp -d)
    build/heft train examples/fashion-mnist.yaml --name mh-local > "$HEFT_HOME/local.out" 2>&1
    build/heft train examples/fashion-mnist.yaml --name mh-mpirun --set cluster.launcher=mpirun \
      --set 'cluster.hosts=[10.79.0.11, 10.79.0.12]' --set "cluster.custom_mpi_options=$OPTS" \
      > "$HEFT_HOME/mpirun.out" 2>&1
    echo
    echo "main job ($rate links): 2 simulated hosts $(grep -o 'final: .*' "$HEFT_HOME/local.out"); 2 namespace hosts $(grep -o 'final: .*' "$HEFT_HOME/mpirun.out")"
    rm -rf "$HEFT_HOME"
  fi
  $HOSTS down --prefix hbench
done
rm -f "$HF"
