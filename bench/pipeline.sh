#!/bin/sh
# Pipeline bubble and activations in flight: heft-train's GPT (n_layer 4, n_embd 128, 16 x
# 128 bytes per step) cut into 2 stages on 2 ranks (one thread each), for the simple and
# interleaved schedules and m = 2, 4, 8, 16 micro-batches, STEPS steps each. Per stage: the
# idle fraction (1 - compute time / step time, measured by the runtime) beside the theory
# (p-1)/(v*m+p-1), and the most micro-batches whose activations the stage held at once;
# interleaved-v2 is the interleaved schedule with 2 virtual stages (model chunks) per rank.
#
# usage: bench/pipeline.sh [BUILD_DIR]   (default build; STEPS=20)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${STEPS:-20}
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "pipeline: $f not found; build first" >&2; exit 2; }
done
echo "# pipeline: gpt n_layer 4 n_embd 128, 2 stages on 2 ranks, 16 x 128 bytes per step, $steps steps; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# schedule m stage idle_fraction theory max_in_flight tokens_per_s"
for kind in simple interleaved interleaved-v2; do
  for m in 2 4 8 16; do
    v=1 schedule=$kind
    [ "$kind" = interleaved-v2 ] && v=2 schedule=interleaved
    out=$(OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
      --batch_size 16 --max_steps "$steps" --lr_schedule constant --eval false --log_every 100000 \
      --partitions 2 --microbatches "$m" --pipeline "$schedule" --virtual_stages "$v")
    tps=$(echo "$out" | sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p')
    echo "$out" | grep "pipeline: stage=" | sed 's/.*pipeline: //' | while read -r line; do
      stage=$(echo "$line" | sed 's/.*stage=\([0-9]*\).*/\1/')
      idle=$(echo "$line" | sed 's/.*idle_fraction=\([0-9.]*\).*/\1/')
      theory=$(echo "$line" | sed 's/.*theory=\([0-9.]*\).*/\1/')
      flight=$(echo "$line" | sed 's/.*max_in_flight=\([0-9]*\).*/\1/')
      echo "$kind $m $stage $idle $theory $flight $tps"
    done
  done
done
