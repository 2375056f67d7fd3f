#!/bin/sh
# Tensor parallelism on 2 ranks: heft-train's GPT (n_layer 4, n_embd 512, 8 heads, 16 x 128
# bytes per step) with tensor_parallel_degree 1 (data parallel over both ranks) and 2 (each
# layer split over both), one thread per rank, STEPS steps, alternated ROUNDS times: tokens/s,
# each rank's parameter bytes (its memory: line) against T = 1's, and for T = 2 the share of
# the training time spent in the tensor-parallel collectives (its tensor: line).
#
# usage: bench/tensor_parallel.sh [BUILD_DIR]   (default build; ROUNDS=2, STEPS=30)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-2}
steps=${STEPS:-30}
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "tensor_parallel: $f not found; build first" >&2; exit 2; }
done
run() {  # $1: tensor degree -> "tokens_per_s params_bytes comm_seconds train_seconds"
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
    --n_layer 4 --n_embd 512 --n_head 8 --batch_size 16 --max_steps "$steps" \
    --lr_schedule constant --eval false --log_every 100000 --tensor_parallel_degree "$1" |
    awk '/\[rank 0\] final:/ { for (i = 1; i <= NF; i++) if ($i ~ /^tokens_per_s=/) { sub(/tokens_per_s=/, "", $i); t = $i } }
         /\[rank 0\] memory: rank=0 params_bytes=/ { for (i = 1; i <= NF; i++) if ($i ~ /^params_bytes=/) { sub(/params_bytes=/, "", $i); p = $i } }
         /\[rank 0\] tensor:/ { for (i = 1; i <= NF; i++) { if ($i ~ /^comm_seconds=/) { sub(/comm_seconds=/, "", $i); c = $i } }; s = $(NF - 2) }
         END { printf "%s %s %s %s", t, p, (c == "" ? 0 : c), (s == "" ? 0 : s) }'
}
echo "# tensor_parallel: gpt n_layer 4 n_embd 512, 2 ranks, 16 x 128 bytes per step, $steps steps; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round T tokens_per_s params_bytes_per_rank params_vs_T1 comm_share"
i=1
while [ "$i" -le "$rounds" ]; do
  set -- $(run 1); t1=$1 p1=$2
  echo "$i 1 $t1 $p1 1.000 -"
  set -- $(run 2)
  echo "$i 2 $1 $2 $(awk -v a="$2" -v b="$p1" 'BEGIN { printf "%.3f", a / b }') $(awk -v c="$3" -v s="$4" 'BEGIN { printf "%.2f", (s > 0 ? c / s : 0) }')"
  i=$((i + 1))
done
