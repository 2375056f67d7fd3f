#!/bin/sh
# Memory per rank of heft-train's GPT (n_layer 8, n_embd 256, AdamW) under data parallelism
# and sharded data parallelism (ZeRO-3, ZeRO-2, hybrid) at world sizes 1, 2 and 4, after
# STEPS steps: the state each rank holds between steps (its `memory:` line: parameters,
# gradients, optimizer state) and its peak RSS, beside the theory for sharding over N
# ranks: DDP's state / N (plus padding), with one unit's full parameters (a block,
# 12·d² + 13·d floats) alive at a time during a step. One thread per rank.
#
# usage: bench/sharded_memory.sh [BUILD_DIR]   (default build; STEPS=3)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${STEPS:-3}
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "sharded_memory: $f not found; build first" >&2; exit 2; }
done
d=256
block_bytes=$(( (12 * d * d + 13 * d) * 4 ))

run() {  # $1 ranks, $2 degree, $3 zero stage -> "state_bytes peak_rss_mb" of rank 0
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n "$1" -- "$build/heft-train" --model gpt \
    --n_layer 8 --n_embd 256 --n_head 8 --batch_size 8 --max_steps "$steps" --eval false \
    --log_every 100000 --sharded_data_parallel_degree "$2" --zero_stage "$3" |
    awk '/\[rank 0\] memory: rank=0 params_bytes/ { split($0, a, /[= ]/);
           for (i = 1; i <= length(a); i++) { if (a[i] == "params_bytes") p = a[i+1];
             if (a[i] == "grads_bytes") g = a[i+1]; if (a[i] == "optimizer_bytes") o = a[i+1]; } }
         /\[rank 0\] memory: rank=0 peak_rss_mb/ { split($0, b, "peak_rss_mb="); r = b[2] }
         END { printf "%d %d %d %s", p, g, o, r }'
}

echo "# sharded_memory: gpt n_layer 8 n_embd 256, AdamW, $steps steps; $(nproc) cores; one block = $block_bytes bytes"
echo "# world strategy params_bytes grads_bytes optimizer_bytes state_bytes ddp_state/world state/(ddp/world) peak_rss_mb"
for world in 1 2 4; do
  ddp=$(run "$world" 1 3)
  set -- $ddp
  ddp_state=$(( $1 + $2 + $3 ))
  echo "$world ddp $1 $2 $3 $ddp_state $(( ddp_state / world )) 1.00 $4"
  [ "$world" -eq 1 ] && continue
  for mode in "zero3 $world 3" "zero2 $world 2" "hybrid 2 3"; do
    set -- $mode
    [ "$1" = hybrid ] && [ "$world" -ne 4 ] && continue
    name=$1 degree=$2 stage=$3
    set -- $(run "$world" "$degree" "$stage")
    state=$(( $1 + $2 + $3 ))
    ideal=$(( ddp_state / degree ))
    echo "$world $name $1 $2 $3 $state $ideal $(awk -v a="$state" -v b="$ideal" 'BEGIN { printf "%.3f", a / b }') $4"
  done
done
