#!/usr/bin/env bash
# A model no rank could hold (issue 27): examples/gpt_sharded.py's GPT at 1 billion
# parameters (24 blocks of width 1872, byte vocabulary, tied head; full fp32 AdamW state
# about 16 GB, so 4 DDP replicas need about 65 GB) trains 5 steps on 4 ranks of this machine
# with deferred_init + ShardedDataParallel (each nn.Linear a sharding unit, so at most a few
# 14 M-parameter matrices are gathered at once; one sequence of 32 tokens per rank and step,
# one thread per rank, AdamW at lr 1e-5, small as nothing warms it up); then DDP of the same
# model, which heft's memory pre-flight refuses on every rank before allocating it. Prints
# the machine (CPU, memcpy GB/s), the parameter count, the loss and seconds of each step,
# every rank's peak RSS and training state, the lowest MemAvailable seen during the run,
# and the DDP refusal.
#
# Safety (the machine is shared): the script does not start unless MemAvailable covers the
# sharded state of all ranks plus --overhead_mib per rank plus the guard, and while a run goes
# it reads MemAvailable 5 times a second; below --guard_mib (1536) it stops the run (SIGTERM
# through heft run, SIGKILL 3 s later; workers die with heft run) and says so, exit 3, so the
# kernel's OOM killer is never reached.
#
#   bench/sharded_1b.sh [--small] [--n_layer 24] [--n_embd 1872] [--n_head 16]
#                       [--block_size 32] [--steps 5] [--ranks 4] [--guard_mib 1536]
#                       [--overhead_mib 512] [--mmap_threshold 4194304] [--lr 1e-5]
# --small: 12 blocks of width 832 (100 M parameters; DDP fits then and trains too).
# The sharded run sets HEFT_SDP_MMAP_THRESHOLD=4194304 (docs/sharded.md, "Performance"), so
# freed unit buffers of 4 MiB and more go back to the system at once: less peak RSS per rank
# for some page faults; --mmap_threshold 0 leaves malloc alone.
set -uo pipefail
cd "$(dirname "$0")/.."
LAYERS=24 WIDTH=1872 HEADS=16 BLOCK=32 STEPS=5 RANKS=4 GUARD_MIB=1536 OVERHEAD_MIB=512 MIN_PARAMS=1000000000 MMAP=4194304 LR=1e-5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --small) LAYERS=12 WIDTH=832 HEADS=8 MIN_PARAMS=0; shift ;;
    --n_layer) LAYERS=$2; shift 2 ;;
    --n_embd) WIDTH=$2; shift 2 ;;
    --n_head) HEADS=$2; shift 2 ;;
    --block_size) BLOCK=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    --guard_mib) GUARD_MIB=$2; shift 2 ;;
    --overhead_mib) OVERHEAD_MIB=$2; shift 2 ;;
    --mmap_threshold) MMAP=$2; shift 2 ;;
    --lr) LR=$2; shift 2 ;;
    *) echo "usage: $0 [--small] [--n_layer L] [--n_embd D] [--n_head H] [--block_size T] [--steps N] [--ranks R] [--guard_mib M] [--overhead_mib M] [--mmap_threshold B] [--lr LR]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft PY=.venv/bin/python
[[ -x $HEFT && -f build/python/heft/torch/parallel/memory.py ]] || { echo "$0: no build with the Python package: build heft and heft_python_c10d first" >&2; exit 1; }
avail_kib() { awk '/^MemAvailable:/{print $2}' /proc/meminfo; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name') (family $(cpu 'cpu family') model $(cpu '^model\s')), $(free -g | awk '/Mem:/{print $2}') GiB; torch $($PY -c 'import torch; print(torch.__version__)')"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  ranks=$RANKS steps=$STEPS n_layer=$LAYERS n_embd=$WIDTH n_head=$HEADS batch=${RANKS}x$BLOCK (1 sequence per rank) lr=$LR HEFT_SDP_MMAP_THRESHOLD=$MMAP"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi

# The model's size on meta tensors (nothing allocated): parameters, DDP's and the shard's state.
read -r PARAMS DDP_STATE SHARD_STATE < <(PYTHONPATH=build/python:examples OMP_NUM_THREADS=1 $PY -c "
import gpt_sharded as G
from heft.torch import parallel as P
with P.deferred_init():
    m = G.GPT($LAYERS, $HEADS, $WIDTH, $BLOCK)
print(P.parameter_count(m), P.training_state_bytes(m), P.training_state_bytes(m, sharded_degree=$RANKS))")
[[ -n ${PARAMS:-} ]] || { echo "sharded_1b: could not size the model" >&2; exit 1; }
echo "# parameters: $PARAMS  training state (fp32 AdamW): $DDP_STATE bytes per DDP replica, $SHARD_STATE per rank sharded over $RANKS"
if (( PARAMS < MIN_PARAMS )); then
  echo "sharded_1b: $PARAMS parameters < $MIN_PARAMS: not the billion-parameter model (--small for a trial)" >&2; exit 2
fi
NEED_KIB=$(( (SHARD_STATE * RANKS) / 1024 + (OVERHEAD_MIB * RANKS + GUARD_MIB) * 1024 ))
echo "# MemAvailable now: $(( $(avail_kib) / 1048576 )) GiB; the sharded run needs about $(( NEED_KIB / 1048576 )) GiB (state + ${OVERHEAD_MIB} MiB per rank + ${GUARD_MIB} MiB guard)"
if (( $(avail_kib) < NEED_KIB )); then
  echo "sharded_1b: MemAvailable $(( $(avail_kib) / 1024 )) MiB < $(( NEED_KIB / 1024 )) MiB: not started (the machine is busy; try later)" >&2; exit 3
fi

LOG=$(mktemp) PID=""
trap '[[ -n $PID ]] && kill -TERM "$PID" 2>/dev/null; rm -f "$LOG"' EXIT
trap 'exit 130' INT TERM
LOWEST=0 STOPPED=0 RC=0 SECONDS_RUN=0
run_watched() {  # $1 strategy: heft run in the background, MemAvailable watched
  local start low now
  start=$(date +%s.%N) low=$(avail_kib) STOPPED=0
  OMP_NUM_THREADS=1 HEFT_SDP_MMAP_THRESHOLD=$MMAP $HEFT run --hosts 1 -n "$RANKS" --grace 3 -- $PY -u examples/gpt_sharded.py \
    --strategy "$1" --steps "$STEPS" --n_layer "$LAYERS" --n_embd "$WIDTH" --n_head "$HEADS" \
    --batch_size "$RANKS" --block_size "$BLOCK" --units linear --lr "$LR" --log_every 1 >"$LOG" 2>&1 &
  PID=$!
  while kill -0 "$PID" 2>/dev/null; do
    now=$(avail_kib)
    (( now < low )) && low=$now
    if (( now < GUARD_MIB * 1024 )); then
      STOPPED=1
      echo "sharded_1b: MemAvailable fell to $(( now / 1024 )) MiB (< $GUARD_MIB MiB) during the $1 run: stopping it (SIGTERM to heft run, SIGKILL after 3 s)" >&2
      kill -TERM "$PID" 2>/dev/null
      for _ in 1 2 3 4 5 6; do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
      kill -KILL "$PID" 2>/dev/null
      break
    fi
    sleep 0.2
  done
  wait "$PID"; RC=$?
  PID=""
  LOWEST=$low
  SECONDS_RUN=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.0f", b - a}')
}

echo
echo "## sharded: heft run --hosts 1 -n $RANKS -- examples/gpt_sharded.py --strategy sharded (deferred_init)"
run_watched sharded
if (( STOPPED )); then tail -20 "$LOG" >&2; exit 3; fi
if (( RC != 0 )); then echo "sharded_1b: the sharded run failed (exit $RC):" >&2; tail -30 "$LOG" >&2; exit 1; fi
echo "# exit $RC after $SECONDS_RUN s (model build and $STEPS steps); lowest MemAvailable during the run: $(( LOWEST / 1048576 )).$(( (LOWEST % 1048576) * 10 / 1048576 )) GiB"
grep -m1 '^\[rank 0\] parameters=' "$LOG"
echo
echo "| step | loss | seconds |"
echo "| --- | --- | --- |"
awk '/^\[rank 0\] step=/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
     printf "| %s | %s | %s |\n", v["step"], v["loss"], v["step_s"] }' "$LOG"
echo
echo "| rank | peak RSS MiB | training state bytes |"
echo "| --- | --- | --- |"
awk '/\] final: rank=/ { for (i = 3; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
     printf "| %s | %s | %s |\n", v["rank"], v["peak_rss_mb"], v["state_bytes"] }' "$LOG" | sort -t'|' -k2n

echo
echo "## ddp: the same model, heft run --hosts 1 -n $RANKS -- examples/gpt_sharded.py --strategy ddp"
run_watched ddp
if (( STOPPED )); then tail -20 "$LOG" >&2; exit 3; fi
echo "# exit $RC after $SECONDS_RUN s; lowest MemAvailable during the run: $(( LOWEST / 1048576 )).$(( (LOWEST % 1048576) * 10 / 1048576 )) GiB"
if grep -q 'MemoryError' "$LOG"; then
  grep -m1 '^\[rank 0\] MemoryError' "$LOG"
  echo "# ranks that printed the MemoryError: $(grep -c '^\[rank [0-9]*\] MemoryError' "$LOG") of $RANKS"
  grep '^heft run:' "$LOG"
elif (( RC == 0 )); then
  echo "# DDP fits at this size and trained:"
  grep '\] final: rank=' "$LOG"
else
  echo "sharded_1b: DDP failed without the pre-flight's MemoryError (exit $RC):" >&2; tail -20 "$LOG" >&2; exit 1
fi
