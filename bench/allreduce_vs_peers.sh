#!/usr/bin/env bash
# heft's allreduce against OpenMPI and Gloo, in one run, on the same sizes, alternating the
# three each round: 2 and 4 ranks on one host (warm), then 2 ranks from cold (no warm-up,
# heft against OpenMPI), then 2 simulated hosts x 2 ranks, hierarchical against the flat TCP
# ring, then the same 1 MiB allreduces beside two busy loops (contention: heft's
# hierarchical, flat ring and shared-memory forms against OpenMPI). Before that: the machine
# (CPU, glibc, kernels in use), its memory bandwidth (memcpy, sum-into, a copy of another
# core's fresh data: the bound for shared memory) and the copy kernels across the 64
# relative alignments. Prints one markdown table per comparison: median time and busbw of
# each, heft's ratios (other's time / heft's: above 1 means heft is faster) and the path
# heft took; then, per size, heft's worst round beside its median (the ratio to OpenMPI in
# the same round), and for 2 ranks the direct form's bound from the memory rates
# (docs/comm.md) and heft's share of it; before each warm round, the cache line's round trip
# between the two CPUs, and after it heft's own probe of that placement (its debug log).
#
#   bench/allreduce_vs_peers.sh [--rounds 3] [--min 4K] [--max 64M] [--iters 20] [--warmup 5]
#                               [--quick] [--ranks "2 4"] [--baseline VAR=VALUE] [--foreground]
# --warmup: untimed calls per size before the timed ones in the warm comparison, on every side
# alike (heft, the baseline, OpenMPI, Gloo). On the 2-vCPU Zen 5 VM the first ~50 calls of a
# size run slower and spread more: 2 ranks, near, 1 MiB: 20 calls after 5 23-33 GB/s, 100
# after 50 28.5-29.1 (docs/performance.md); the cold comparison keeps 0.
# --quick skips the alignment sweep, the two-host comparison and the busy loops. --ranks: the
# world sizes of the warm comparison. --baseline: each warm round also runs heft with that
# environment (e.g. HEFT_SHM_CONTENDED_SPIN_US=0, the wait policy before it), as heft_baseline,
# so a change is measured against what it replaced in the same minutes. --foreground: run
# everything in a session of its own whose autogroup has nice -20 (needs root). With
# sched_autogroup_enabled=1 the scheduler first shares each core equally among sessions, and
# nice orders tasks only inside one: another session's `nice -n 19` build takes half a core
# from the ranks all the same (2 ranks at 1 MiB, 2026-11-27 beside load 8-12: 1.8 GB/s by
# the median without, 24.4 with, three minutes apart); it does nothing against the host's
# own contention. The header prints the load and this session's autogroup.
# Needs a build (./setup.sh) and the peer harnesses (HEFT_PEERS, default ../shared/peers).
set -euo pipefail
SELF=$(realpath "$0")
ARGS=("$@")
cd "$(dirname "$0")/.."
ROUNDS=3 MIN=4K MAX=64M ITERS=20 WARMUP=5 QUICK=0 RANKS="2 4" BASELINE= FOREGROUND=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) RANKS=$2; shift 2 ;;
    --baseline) BASELINE=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --min) MIN=$2; shift 2 ;;
    --max) MAX=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --foreground) FOREGROUND=1; shift ;;
    *) echo "usage: $0 [--rounds R] [--min 4K] [--max 64M] [--iters N] [--warmup N] [--quick] [--ranks \"2 4\"] [--baseline VAR=VALUE] [--foreground]" >&2; exit 2 ;;
  esac
done
if [[ $FOREGROUND == 1 && -z ${HEFT_BENCH_SESSION:-} ]]; then
  HEFT_BENCH_SESSION=1 exec setsid -w "$SELF" "${ARGS[@]}"
fi
if [[ $FOREGROUND == 1 ]]; then
  echo -20 >/proc/self/autogroup 2>/dev/null ||
    { echo "$0: --foreground: cannot set this session's autogroup nice to -20 (needs root or CAP_SYS_NICE, and a kernel with autogroups)" >&2; exit 1; }
fi
[[ -z $BASELINE || $BASELINE =~ ^HEFT_[A-Z0-9_]+=.*$ ]] ||
  { echo "$0: --baseline: expected HEFT_NAME=VALUE, found '$BASELINE'" >&2; exit 2; }
for n in $RANKS; do
  [[ $n =~ ^[0-9]+$ && $n -ge 2 ]] || { echo "$0: --ranks: expected world sizes >= 2, found '$n'" >&2; exit 2; }
done
HEFT=build/heft
PEERS=${HEFT_PEERS:-../shared/peers}
PY=.venv/bin/python
[[ -x $HEFT ]] || { echo "$0: $HEFT missing: run ./setup.sh first" >&2; exit 1; }
[[ -f $PEERS/allreduce_mpi.py ]] || { echo "$0: no peer harnesses in $PEERS (set HEFT_PEERS)" >&2; exit 1; }
OUT=$(mktemp -d)
BUSY=()
stop_busy() { [[ ${#BUSY[@]} -gt 0 ]] && kill "${BUSY[@]}" 2>/dev/null; BUSY=(); }
trap 'stop_busy; rm -rf "$OUT"; echo; echo "# load at the end: $(cut -d" " -f1-3 /proc/loadavg)"' EXIT

cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }

# worst_rounds N A PREFIX_A B PREFIX_B: per size, A's median and worst-round busbw, the
# ratio B time / A time in each round (median and worst), and for N = 2 the direct form's
# bound from the memory rates (docs/comm.md): per rank, N/2 bytes copied into the slot,
# N/2 reduced, N/2 copied from the peer; "local" at one core's copy and sum-into rates,
# "peer" with the peer's data at the rate of a copy of a peer core's data.
worst_rounds() {
  $PY - "$@" "$OUT/memory.csv" "$ROUNDS" <<'PYEOF'
import csv, statistics, sys
n, a, pa, b, pb, mem, rounds = sys.argv[1:8]
n, rounds = int(n), int(rounds)
def rows(path):
    out = {}
    for line in open(path):
        p = line.split()
        if p and not line.startswith("#"):
            out[int(p[0])] = (float(p[1]), float(p[3]))
    return out
ra = [rows(f"{pa}-{r}") for r in range(1, rounds + 1)]
rb = [rows(f"{pb}-{r}") for r in range(1, rounds + 1)]
rate = {}
for r in csv.reader(open(mem)):
    if r and r[0].startswith("BM_") and r[5]:
        kind, size = r[0].split("/")
        rate.setdefault(int(size), {})[kind] = float(r[5])
def bound(size):  # busbw GB/s of the direct form's bytes at the memory rates, 2 ranks
    m = rate.get(size)
    if n != 2 or not m or not all(m.get(k) for k in ("BM_Memcpy", "BM_SumInto", "BM_CopyFromPeerCore")):
        return None
    copy, add, peer = m["BM_Memcpy"], m["BM_SumInto"], m["BM_CopyFromPeerCore"]
    half = size / 2
    local = half * (2 / copy + 1 / add)
    cross = half * (1 / copy + 1 / min(add, peer) + 1 / peer)
    return size / local / 1e9, size / cross / 1e9
head = f"| bytes | {a} busbw median | {a} busbw worst | {b}/{a} median | {b}/{a} worst round |"
sep = "| ---: | ---: | ---: | ---: | ---: |"
if n == 2:
    head += " bound local | bound peer | median/bound local | worst/bound local |"
    sep += " ---: | ---: | ---: | ---: |"
print(head); print(sep)
for size in sorted(ra[0]):
    bus = [x[size][1] for x in ra if size in x]
    ratio = [y[size][0] / x[size][0] for x, y in zip(ra, rb) if size in x and size in y]
    if not bus or not ratio:
        continue
    cells = [str(size), "%.3f" % statistics.median(bus), "%.3f" % min(bus),
             "%.2fx" % statistics.median(ratio), "%.2fx" % min(ratio)]
    bd = bound(size)
    if n == 2:
        cells += ["%.1f" % bd[0], "%.1f" % bd[1], "%.0f%%" % (100 * statistics.median(bus) / bd[0]),
                  "%.0f%%" % (100 * min(bus) / bd[0])] if bd else ["n/a"] * 4
    print("| " + " | ".join(cells) + " |")
PYEOF
}
echo "# machine: $(nproc) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model[[:space:]]')), $(free -g | awk '/Mem:/{print $2}') GiB, L3 $(cat /sys/devices/system/cpu/cpu0/cache/index3/size 2>/dev/null || echo '?'), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  rounds=$ROUNDS iters=$ITERS warmup=$WARMUP  heft $($HEFT bench allreduce --ranks 2 --min 4 --max 4 --iters 1 | grep -o 'kernels=[a-z0-9]*')"
echo "# load at the start: $(cut -d' ' -f1-3 /proc/loadavg); scheduler: $(cat /proc/self/autogroup 2>/dev/null || echo 'no autogroup'), sched_autogroup_enabled=$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a)"

echo
echo "## memory bandwidth of one core (the shared-memory bound), GB/s of buffer processed"
build/memory_bandwidth_bench --benchmark_filter='^BM_(Memcpy|SumInto|CopyFromPeerCore|SumIntoBf16)/' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null |
  tee "$OUT/memory.csv" | $PY -c '
import csv, sys
rows = [r for r in csv.reader(sys.stdin) if r and r[0].startswith("BM_")]
by = {}
for r in rows:
    kind, size = r[0].split("/")
    by.setdefault(int(size), {})[kind] = float(r[5]) / 1e9  # bytes_per_second
print("| bytes | memcpy (glibc) | sum-into (heft) | copy from a peer core (heft) |")
print("| ---: | ---: | ---: | ---: |")
for size in sorted(by):
    row = by[size]
    print("| %d | %.1f | %.1f | %.1f |" % (size, row.get("BM_Memcpy", 0), row.get("BM_SumInto", 0),
                                          row.get("BM_CopyFromPeerCore", 0)))
'

if [[ $QUICK == 0 ]]; then
  echo
  # Best of 10: at 4 MiB (the inputs in L3, which the host shares) best of 5 still left one
  # offset at 0.76-0.83 of the best in most runs, a different offset each run (0, 10, 24, 31,
  # 33, 36 in six runs on Zen 5; the aligned offset 0 among them): noise, not alignment.
  echo "## copy kernels across the 64 relative alignments (GB/s, best of 10 per offset, the repetitions interleaved in random order so a burst of load does not slow a run of neighbouring offsets; worst/best at least 0.8 is flat)"
  build/kernel_alignment_bench --benchmark_min_time=0.01 --benchmark_repetitions=10 \
    --benchmark_enable_random_interleaving=true --benchmark_format=csv 2>/dev/null |
    $PY -c '
import csv, sys
names = ["glibc memcpy", "heft copy (avx2)", "heft copy (portable)", "heft sum a+b (avx2, f32)", "heft sum a+b into two (avx2, f32)"]
by = {}
for r in csv.reader(sys.stdin):
    if not r or not r[0].startswith("BM_Align") or not r[5] or r[0].endswith(("_mean", "_median", "_stddev", "_cv")):
        continue
    parts = dict(p.split(":") for p in r[0].split("/")[1:] if ":" in p)
    key = (int(parts["kernel"]), int(parts["bytes"]))
    offset = int(parts["offset"])
    # Noise only slows a run down: the best of the repetitions is the kernel at that offset.
    cur = by.setdefault(key, {})
    cur[offset] = max(cur.get(offset, 0.0), float(r[5]) / 1e9)
print("| kernel | bytes | best | worst (at offset) | worst/best |")
print("| --- | ---: | ---: | ---: | ---: |")
for (k, b), per_offset in sorted(by.items()):
    v = [(bw, off) for off, bw in per_offset.items()]
    best = max(v); worst = min(v)
    print("| %s | %d | %.1f | %.1f (%d) | %.2f |" % (names[k], b, best[0], worst[0], worst[1], worst[0] / best[0]))
'
fi

# The cache line round trip between the first two CPUs (ns), just before a round: the host
# places this machine's two vCPUs near (about 100 ns, a shared cache) or far (about 400 ns)
# and moves them within seconds, and every shared-memory allreduce's speed follows it.
round_trip() {
  build/memory_bandwidth_bench --benchmark_filter=RoundTrip --benchmark_min_time=0.05 \
    --benchmark_format=csv 2>/dev/null | awk -F, '/^"BM_CacheLineRoundTrip/{printf "%.0f", $3}'
}

# heft's own probe of the placement (docs/comm.md, near and far): its debug log holds local
# rank 0's first answer and every change in a run, as `far(252)` (ns per synchronisation),
# joined by '>'; '-' where it never probed (more than 2 ranks, or ranks sharing cores).
heft_probed() {
  SPDLOG_LEVEL=debug "$@" >"$OUT/raw" 2>&1 || { grep -v '^\[' "$OUT/raw" >&2; return 1; }
  grep -v '^\[' "$OUT/raw"
  local seen
  seen=$(awk '/rank 0: shared-memory placement/{gsub(/\(/, "", $9); printf "%s%s(%s)", sep, $8, $9; sep=">"}' "$OUT/raw")
  probes+=" ${seen:--}"
}

port=29611
for n in $RANKS; do
  placement="" probes=""
  for r in $(seq "$ROUNDS"); do
    placement+=" $(round_trip)"
    heft_probed $HEFT bench allreduce --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" \
      --warmup "$WARMUP" >"$OUT/heft-$n-$r"
    if [[ -n $BASELINE ]]; then
      env "$BASELINE" $HEFT bench allreduce --ranks "$n" --min "$MIN" --max "$MAX" \
        --iters "$ITERS" --warmup "$WARMUP" >"$OUT/baseline-$n-$r"
    fi
    mpirun --allow-run-as-root --oversubscribe -np "$n" $PY "$PEERS/allreduce_mpi.py" \
      --min "$MIN" --max "$MAX" --iters "$ITERS" --warmup "$WARMUP" >"$OUT/openmpi-$n-$r" 2>/dev/null
    $PY "$PEERS/allreduce_gloo.py" --ranks "$n" --min "$MIN" --max "$MAX" --iters "$ITERS" \
      --warmup "$WARMUP" --port $((port++)) >"$OUT/gloo-$n-$r" 2>/dev/null
  done
  echo
  echo "## allreduce, $n ranks, one host, warm (median of $ROUNDS)${BASELINE:+; heft_baseline: $BASELINE}"
  $PY bench/compare_rows.py heft "$OUT"/heft-$n-* -- openmpi "$OUT"/openmpi-$n-* -- gloo "$OUT"/gloo-$n-* \
    ${BASELINE:+-- heft_baseline "$OUT"/baseline-$n-*}
  echo
  echo "## allreduce, $n ranks: every round (worst beside median)"
  worst_rounds "$n" heft "$OUT/heft-$n" openmpi "$OUT/openmpi-$n"
  echo "cache line round trip between the two CPUs before each round (ns; near about 100, far about 400):$placement"
  echo "heft's own placement probe in each round (its answers in order, ns per sync; which are far: this machine's record, docs/comm.md):$probes"
  if [[ -n $BASELINE ]]; then
    echo
    echo "## the same rounds, heft_baseline ($BASELINE)"
    worst_rounds "$n" heft_baseline "$OUT/baseline-$n" openmpi "$OUT/openmpi-$n"
  fi
done

for r in $(seq "$ROUNDS"); do
  $HEFT bench allreduce --ranks 2 --min 4K --max 256K --iters 20 --warmup 0 >"$OUT/cold-heft-$r"
  mpirun --allow-run-as-root --oversubscribe -np 2 $PY "$PEERS/allreduce_mpi.py" \
    --min 4K --max 256K --iters 20 --warmup 0 >"$OUT/cold-openmpi-$r" 2>/dev/null
done
echo
echo "## allreduce, 2 ranks, from cold (--iters 20 --warmup 0; median of $ROUNDS)"
$PY bench/compare_rows.py heft "$OUT"/cold-heft-* -- openmpi "$OUT"/cold-openmpi-*
echo
echo "## allreduce, 2 ranks, from cold: every round (worst beside median)"
worst_rounds 0 heft "$OUT/cold-heft" openmpi "$OUT/cold-openmpi"

[[ $QUICK == 1 ]] && exit 0
for r in $(seq "$ROUNDS"); do
  $HEFT bench allreduce --ranks 4 --hosts 2 --algo hierarchical --min "$MIN" --max "$MAX" \
    --iters "$ITERS" >"$OUT/hier-$r"
  HEFT_TRANSPORT=tcp $HEFT bench allreduce --ranks 4 --hosts 2 --algo ring --min "$MIN" \
    --max "$MAX" --iters "$ITERS" >"$OUT/flat-$r"
done
echo
echo "## allreduce, 2 simulated hosts x 2 ranks: hierarchical vs flat TCP ring (median of $ROUNDS)"
$PY bench/compare_rows.py hierarchical "$OUT"/hier-* -- flat_tcp_ring "$OUT"/flat-*
echo
echo "## allreduce, 2 simulated hosts x 2 ranks: every round (worst beside median)"
worst_rounds 0 hierarchical "$OUT/hier" flat_tcp_ring "$OUT/flat"

# Contention: two busy loops on the cores beside 4 ranks (2 x 2 simulated hosts for the
# hierarchical form and the flat ring; one host for heft's shared memory and OpenMPI).
for r in $(seq "$ROUNDS"); do
  for _ in 1 2; do (while :; do :; done) & BUSY+=($!); done
  $HEFT bench allreduce --ranks 4 --hosts 2 --algo hierarchical --min 1M --max 1M \
    --iters "$ITERS" >"$OUT/busy-hier-$r"
  HEFT_TRANSPORT=tcp $HEFT bench allreduce --ranks 4 --hosts 2 --algo ring --min 1M --max 1M \
    --iters "$ITERS" >"$OUT/busy-flat-$r"
  $HEFT bench allreduce --ranks 4 --min 1M --max 1M --iters "$ITERS" >"$OUT/busy-shm-$r"
  mpirun --allow-run-as-root --oversubscribe -np 4 $PY "$PEERS/allreduce_mpi.py" \
    --min 1M --max 1M --iters "$ITERS" >"$OUT/busy-openmpi-$r" 2>/dev/null
  stop_busy
done
echo
echo "## allreduce of 1 MiB, 4 ranks beside two busy loops (median of $ROUNDS)"
$PY bench/compare_rows.py hierarchical "$OUT"/busy-hier-* -- flat_tcp_ring "$OUT"/busy-flat-* \
  -- heft_shm "$OUT"/busy-shm-* -- openmpi "$OUT"/busy-openmpi-*
echo
echo "## the same, every round: hierarchical against the flat ring, heft shm against OpenMPI"
worst_rounds 0 hierarchical "$OUT/busy-hier" flat_tcp_ring "$OUT/busy-flat"
echo
worst_rounds 0 heft_shm "$OUT/busy-shm" openmpi "$OUT/busy-openmpi"
