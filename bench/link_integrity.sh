#!/usr/bin/env bash
# The choice between integrity and speed on TCP links (docs/security.md): what a per-frame MAC
# would cost against what heft's TCP allreduce moves, on this machine, in one run.
#  1. bench/link_integrity_bench.cc: one core's MAC and AEAD throughput (HMAC-SHA256,
#     Poly1305, GMAC, AES-256-GCM, ChaCha20-Poly1305) at 64 KiB-4 MiB, beside memcpy.
#  2. `heft bench allreduce` on 2 simulated hosts (TCP between them), 4-64 MiB, --rounds times:
#     the link's busbw, median and worst.
# Then, per MAC: the CPU time a rank would add per allreduce, as a fraction of the allreduce's
# time. A ring rank sends and receives about 2 (n-1)/n of the buffer each way and would MAC
# both (sender computes, receiver checks), about 2x busbw bytes a second: overhead = 2 busbw /
# MAC rate, paid in full where the MAC runs on the rank's own thread, less where it overlaps.
#
#   bench/link_integrity.sh [--rounds 3]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(getconf _NPROCESSORS_ONLN) cores, $(date -u +%FT%TZ)"
echo "# memcpy 1 MiB: $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/1048576$' 2>/dev/null | grep -o 'bytes_per_second=[^ ]*' | cut -d= -f2)"
macs=$(build/link_integrity_bench --benchmark_format=csv 2>/dev/null | grep '^"BM_')
busbw=""
for r in $(seq "$ROUNDS"); do
  busbw+=$(build/heft bench allreduce -n 2 --hosts 2 --min 4M --max 64M --iters 10 2>/dev/null |
           awk '!/^#/ {printf "%s %s\n", $1, $4}')$'\n'
done
MACS="$macs" BUSBW="$busbw" python3 - <<'PY'
import collections, csv, io, os, statistics
rates = collections.defaultdict(dict)
for row in csv.reader(io.StringIO(os.environ["MACS"])):
    name, size = row[0].split("/")
    rates[name.removeprefix("BM_")][int(size)] = float(row[5]) / 1e9  # bytes_per_second
links = collections.defaultdict(list)
for line in os.environ["BUSBW"].split("\n"):
    if line.strip():
        b, bw = line.split()
        links[int(b)].append(float(bw))
print("\n## One core's MAC / AEAD throughput (GB/s, CPU time)\n")
sizes = sorted(next(iter(rates.values())))
print("| | " + " | ".join(f"{s >> 10} KiB" for s in sizes) + " |")
print("|---" * (len(sizes) + 1) + "|")
for name, by in rates.items():
    print(f"| {name} | " + " | ".join(f"{by[s]:.2f}" for s in sizes) + " |")
print(f"\n## heft TCP allreduce, 2 ranks on 2 simulated hosts ({len(next(iter(links.values())))} rounds)\n")
print("| bytes | busbw GB/s median | worst | " + " | ".join(f"+{m} (median)" for m in rates if m != "Memcpy") + " |")
print("|---" * (3 + len(rates) - 1) + "|")
for b, bws in sorted(links.items()):
    med = statistics.median(bws)
    over = [f"{2 * med / rates[m][1 << 20] * 100:.0f}%" for m in rates if m != "Memcpy"]
    print(f"| {b} | {med:.3f} | {min(bws):.3f} | " + " | ".join(over) + " |")
PY
