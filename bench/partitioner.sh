#!/bin/sh
# The automatic partitioner, two ways.
#
# sweep: against a uniform split and against every split: heft-train's GPT with a heavy head
#   (n_layer 4, n_embd 256, vocab 16384: the head is about 5 blocks' worth of parameters and
#   compute), 2 pipeline stages on 2 ranks, 8 micro-batches, STEPS steps. Layers: 0
#   embedding, 1-4 blocks, 5 head; a split is the first layer of stage 1. Prints tokens/s of
#   the automatic split (and which it chose), of the uniform split by layer count (3), and of
#   every split 1..5, then auto / uniform and auto / best.
# stability: examples/gpt-pipeline.yaml's GPT and layout (partitions 2 x data 2 on 4 ranks,
#   batch 16, 8 micro-batches) profiled afresh RUNS times, STEPS steps each: each run's
#   split, its predicted against measured stage times (ms per micro-batch), and whether every
#   run chose the same split.
#
# usage: bench/partitioner.sh [BUILD_DIR]   (default build; STEPS=15, RUNS=5,
#        PART=all|sweep|stability)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${STEPS:-15}
runs=${RUNS:-5}
part=${PART:-all}
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "partitioner: $f not found; build first" >&2; exit 2; }
done
case $part in all|sweep|stability) ;; *) echo "partitioner: PART: expected all, sweep or stability, found '$part'" >&2; exit 2;; esac
echo "# partitioner: $(nproc) cores ($(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"

if [ "$part" != stability ]; then
  run() {  # $1: extra arguments -> the rank-1 final line's tokens/s (and the plan on stdout 2)
    OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
      --n_layer 4 --n_embd 256 --n_head 8 --vocab 16384 --batch_size 16 --max_steps "$steps" \
      --lr_schedule constant --eval false --log_every 100000 --partitions 2 --microbatches 8 $1
  }
  tokens() { sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p'; }
  echo "# sweep: gpt n_layer 4 n_embd 256 vocab 16384, 2 stages on 2 ranks, 8 micro-batches, $steps steps"
  out=$(run "")
  auto=$(echo "$out" | tokens)
  chosen=$(echo "$out" | sed -n 's/.*\] 1 \{6\}\([a-z.0-9]*\) .*/\1/p' | head -n 1)
  echo "auto $auto (stage 1 starts at $chosen)"
  best=0
  for b in 1 2 3 4 5; do
    t=$(run "--partition_boundaries $b" | tokens)
    echo "split_at_$b $t"
    [ "$b" = 3 ] && uniform=$t
    best=$(awk -v a="$t" -v b="$best" 'BEGIN { print (a > b) ? a : b }')
  done
  echo "uniform (split at 3) $uniform; best $best"
  echo "ratio auto/uniform=$(awk -v a="$auto" -v b="$uniform" 'BEGIN { printf "%.2f", a / b }') auto/best=$(awk -v a="$auto" -v b="$best" 'BEGIN { printf "%.2f", a / b }')"
fi

if [ "$part" != sweep ]; then
  echo "# stability: examples/gpt-pipeline.yaml's gpt, partitions 2 x data 2 on 4 ranks, batch 16, 8 micro-batches, $steps steps, $runs runs"
  splits=""
  i=1
  while [ "$i" -le "$runs" ]; do
    out=$(OMP_NUM_THREADS=1 "$build/heft" run --hosts 2 -n 2 -- "$build/heft-train" --model gpt \
      --batch_size 16 --max_steps "$steps" --lr_schedule constant --eval false --log_every 100000 \
      --generate 0 --partitions 2 --microbatches 8)
    split=$(echo "$out" | sed -n 's/.*this stage: layers \([^)]*\)).*/stage 1: \1/p' | head -n 1)
    echo "run $i: $split"
    echo "$out" | sed -n '/predicted (profile) against measured/,/^\[rank [0-9]*\] 1 /p' | sed 's/^\[rank [0-9]*\] /  /'
    splits="$splits$split
"
    i=$((i + 1))
  done
  distinct=$(printf '%s' "$splits" | sort -u | wc -l)
  echo "distinct splits in $runs runs: $distinct"
fi
