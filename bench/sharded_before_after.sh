#!/usr/bin/env bash
# Sharded data parallel on two builds of heft in one run (a change's before and after),
# alternating the builds within every round so both see the same machine state:
#   heft-train   heft-train's GPT (4 blocks of width 128, batch 16, 30 steps) sharded over
#                2 ranks (ZeRO-3), under `heft run`
#   python       heft.torch.parallel.ShardedDataParallel on examples/gpt_sharded.py (the
#                same shape, 30 steps) at 2 ranks, under `heft run`
# Each build runs its own binaries and its own Python package ($BUILD/python). Prints every
# run (tokens/s of all ranks, rank 0's peak RSS), then per workload the median and the worst
# round of each build and after/before.
#
#   bench/sharded_before_after.sh --before DIR --after DIR [--rounds 5]
#     DIR: a build folder with heft, heft-train, memory_bandwidth_bench and python/heft
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5 before="" after=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --after) after=$2; shift 2 ;;
    *) echo "usage: $0 --before DIR --after DIR [--rounds R]" >&2; exit 2 ;;
  esac
done
py=${PYTHON:-.venv/bin/python}
for b in "$before" "$after"; do
  [[ -n $b && -x $b/heft && -x $b/heft-train && -f $b/python/heft/torch/__init__.py ]] ||
    { echo "sharded_before_after: '$b' is not a build with heft, heft-train and python/heft" >&2; exit 2; }
done
export OMP_NUM_THREADS=1
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(getconf _NPROCESSORS_ONLN) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')); torch $($py -c 'import torch; print(torch.__version__)')"
echo "# memcpy 1 MiB GB/s: $("$after/memory_bandwidth_bench" --benchmark_filter='BM_Memcpy/1048576$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{printf "%.1f", $6/1e9}')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ); before $before, after $after; $rounds rounds; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round build workload tokens_per_s peak_rss_mib"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run() {  # build workload -> "tokens_per_s peak_rss_mib"
  local b=$1 w=$2
  case "$w" in
    heft-train)
      "$b/heft" run --hosts 1 -n 2 -- "$b/heft-train" --model gpt --n_layer 4 --n_embd 128 \
        --n_head 4 --batch_size 16 --max_steps 30 --eval false --log_every 100000 \
        --sharded_data_parallel_degree 2 >"$log" 2>&1 || true
      awk '/\[rank 0\] final:/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "tokens_per_s") t = kv[2] } }
           /\[rank 0\] memory: rank=0 peak_rss_mb/ { split($0, kv, "peak_rss_mb="); m = kv[2] }
           END { if (t != "") printf "%s %s", t, m }' "$log" ;;
    python)
      "$b/heft" run -n 2 -- $py -u examples/gpt_sharded.py --strategy sharded --steps 30 \
        --n_layer 4 --n_embd 128 --n_head 4 --batch_size 16 --block_size 128 \
        --log_every 100000 >"$log" 2>&1 || true
      awk '/^\[rank 0\] final: rank=0 / { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
           printf "%s %s", v["tokens_per_s"], v["peak_rss_mb"] }' "$log" ;;
  esac
}

rows=""
for r in $(seq "$rounds"); do
  for w in heft-train python; do
    if (( r % 2 )); then order="before after"; else order="after before"; fi
    for side in $order; do
      if [[ $side == before ]]; then b=$before; else b=$after; fi
      v=$(run "$b" "$w")
      [[ -n $v ]] || { echo "sharded_before_after: $side $w gave no throughput:" >&2; tail -20 "$log" >&2; exit 1; }
      echo "$r $side $w $v"
      rows+="$r $side $w $v"$'\n'
    done
  done
done

ROWS="$rows" python3 - <<'PY'
import collections, os, statistics
tok, rss = collections.defaultdict(dict), collections.defaultdict(dict)
for line in os.environ["ROWS"].strip().split("\n"):
    r, side, w, t, m = line.split()
    tok[(w, side)][int(r)], rss[(w, side)][int(r)] = float(t), float(m)
print("\n| workload | before tokens/s median (worst) | after median (worst) | after/before median | worst round's after/before | peak RSS MiB before / after (median) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for w in ("heft-train", "python"):
    b, a = tok[(w, "before")], tok[(w, "after")]
    per_round = [a[r] / b[r] for r in a]
    print(f"| {w} | {statistics.median(b.values()):.0f} ({min(b.values()):.0f}) | "
          f"{statistics.median(a.values()):.0f} ({min(a.values()):.0f}) | "
          f"{statistics.median(a.values()) / statistics.median(b.values()):.2f}x | {min(per_round):.2f}x | "
          f"{statistics.median(rss[(w, 'before')].values()):.0f} / {statistics.median(rss[(w, 'after')].values()):.0f} |")
PY
