#!/usr/bin/env bash
# heft's allreduce on two builds in one run (a change's before and after): `heft bench
# allreduce` on one host, 2 and 4 ranks, f32 sum from 1 KiB to 256 KiB (factor 2: the sizes
# where the shared-memory small and direct steps cross; --workloads MIN,MAX others), the builds alternating within every
# round so both see the same machine state. Each build runs with its own heft home (a fresh
# temporary HEFT_HOME per build, kept for the run: a build that measures and records its
# choices does so in its first round, later rounds read the record). Prints every row, then
# per (ranks, size) the median busbw GB/s of each build, after/before, the worst round's
# after/before and the paths each build ran.
#   bench/allreduce_before_after.sh --before DIR --after DIR [--rounds 4] [--workloads 1K,4M]
#     [--before-env 'HEFT_SHM_FAR_NS=120 ...'] (the same build: a rule against its measurement)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/before_after.sh 4 "$@"
# --workloads MIN,MAX: the sizes (default 1K,256K)
min=${workloads%%,*} max=${workloads##*,}
[[ -n $workloads ]] || { min=1K max=256K; }
before_after_header
homes=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$homes" "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for n in 2 4; do
    if (( r % 2 )); then order="before after"; else order="after before"; fi
    for side in $order; do
      dir=${!side}
      side_env "$side" HEFT_HOME="$homes/$side" "$dir/heft" bench allreduce -n "$n" --min "$min" --max "$max" --factor 2 \
        --iters 200 --warmup 50 2>&1 | awk -v r="$r" -v s="$side" -v n="$n" '/^[0-9]/ { print r, s, n, $1, $4, $5 }' |
        tee -a "$log"
    done
  done
done
python3 - "$log" <<'PY'
import collections, statistics, sys
bw, paths = collections.defaultdict(dict), collections.defaultdict(set)
for line in open(sys.argv[1]):
    r, side, n, size, busbw, path = line.split()
    bw[(int(n), int(size), side)][int(r)] = float(busbw)
    paths[(int(n), int(size), side)].add(path)
print("\n| ranks | bytes | before busbw | after busbw | after/before | worst round | path before | path after |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
for n, size in sorted({(n, s) for n, s, _ in bw}):
    b, a = bw[(n, size, "before")], bw[(n, size, "after")]
    worst = min(a[r] / b[r] for r in a if r in b and b[r] > 0)
    mb, ma = statistics.median(b.values()), statistics.median(a.values())
    print(f"| {n} | {size} | {mb:.2f} | {ma:.2f} | {ma / mb:.2f} | {worst:.2f} | "
          f"{', '.join(sorted(paths[(n, size, 'before')]))} | {', '.join(sorted(paths[(n, size, 'after')]))} |")
PY
