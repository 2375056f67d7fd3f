#!/usr/bin/env bash
# Sharded data parallel on two builds of heft in one run (a change's before and after),
# alternating the builds within every round so both see the same machine state:
#   heft-train   heft-train's GPT (4 blocks of width 128, batch 16, 30 steps) sharded over
#                2 ranks (ZeRO-3), under `heft run`
#   python       heft.torch.parallel.ShardedDataParallel on examples/gpt_sharded.py (the
#                same shape, 30 steps) at 2 ranks, under `heft run`
# and with --workloads (default heft-train,python) the pipeline's too:
#   heft-train-pipeline  the same GPT cut into 2 stages, 8 micro-batches, interleaved (the last
#                        stage's figures: it prints the final line)
#   python-pipeline      examples/gpt_3d.py --tensor 1 --pipeline 2 (heft.torch.parallel.Pipeline,
#                        8 micro-batches, interleaved), the same shape (no peak RSS: nan)
# Each build runs its own binaries and its own Python package ($BUILD/python). Prints every
# run (tokens/s of all ranks, rank 0's peak RSS), then per workload the median and the worst
# round of each build and after/before.
#
#   bench/sharded_before_after.sh --before DIR --after DIR [--rounds 5] [--workloads a,b]
#     DIR: a build folder with heft, heft-train, memory_bandwidth_bench and python/heft
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/before_after.sh 5 "$@"
workloads=${workloads:-heft-train,python}
py=${PYTHON:-.venv/bin/python}
before_after_header
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
    heft-train-pipeline)
      "$b/heft" run --hosts 1 -n 2 -- "$b/heft-train" --model gpt --n_layer 4 --n_embd 128 \
        --n_head 4 --batch_size 16 --max_steps 30 --eval false --log_every 100000 \
        --partitions 2 --microbatches 8 >"$log" 2>&1 || true
      awk '/\[rank 1\] final:/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "tokens_per_s") t = kv[2] } }
           /\[rank 0\] memory: rank=0 peak_rss_mb/ { split($0, kv, "peak_rss_mb="); m = kv[2] }
           END { if (t != "") printf "%s %s", t, (m == "" ? "nan" : m) }' "$log" ;;
    python-pipeline)
      "$b/heft" run -n 2 -- $py -u examples/gpt_3d.py --tensor 1 --pipeline 2 --microbatches 8 \
        --steps 30 --n_layer 4 --n_embd 128 --n_head 4 --batch_size 16 --block_size 128 \
        --log_every 100000 >"$log" 2>&1 || true
      awk '/^\[rank 0\] final: rank=0 / { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "tokens_per_s") t = kv[2] } }
           END { if (t != "") printf "%s nan", t }' "$log" ;;
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
  for w in ${workloads//,/ }; do
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

ROWS="$rows" WORKLOADS="$workloads" python3 - <<'PY'
import collections, os, statistics
tok, rss = collections.defaultdict(dict), collections.defaultdict(dict)
for line in os.environ["ROWS"].strip().split("\n"):
    r, side, w, t, m = line.split()
    tok[(w, side)][int(r)], rss[(w, side)][int(r)] = float(t), float(m)
print("\n| workload | before tokens/s median (worst) | after median (worst) | after/before median | worst round's after/before | peak RSS MiB before / after (median) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for w in os.environ["WORKLOADS"].split(","):
    b, a = tok[(w, "before")], tok[(w, "after")]
    per_round = [a[r] / b[r] for r in a]
    print(f"| {w} | {statistics.median(b.values()):.0f} ({min(b.values()):.0f}) | "
          f"{statistics.median(a.values()):.0f} ({min(a.values()):.0f}) | "
          f"{statistics.median(a.values()) / statistics.median(b.values()):.2f}x | {min(per_round):.2f}x | "
          f"{statistics.median(rss[(w, 'before')].values()):.0f} / {statistics.median(rss[(w, 'after')].values()):.0f} |")
PY
