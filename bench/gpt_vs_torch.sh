#!/bin/sh
# heft-train's GPT (data parallel, and sharded ZeRO-3 over both ranks) against PyTorch DDP on
# Gloo (../shared/peers/gpt_torch.py, the same GPT): 2 ranks on this machine, one thread
# each, global batch 16 sequences of 128 bytes, 4 blocks of width 128, STEPS steps. The
# three run alternately, ROUNDS times each, in one invocation (the machine is shared and
# noisy); prints every run's training tokens/s (all ranks), the medians and the ratios.
# heft times every step; the peer skips its first 5 (warm-up), which favours the peer.
#
# usage: bench/gpt_vs_torch.sh [BUILD_DIR]   (default build; ROUNDS=3, STEPS=60,
#                                             PYTHON=.venv/bin/python)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-3}
steps=${STEPS:-60}
python=${PYTHON:-.venv/bin/python}
peer=../shared/peers/gpt_torch.py
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "gpt_vs_torch: $f not found; build first (cmake --build $build)" >&2; exit 2; }
done
[ -f "$peer" ] || { echo "gpt_vs_torch: $peer not found" >&2; exit 2; }
[ -d /usr/share/games/fortunes ] || { echo "gpt_vs_torch: install the Debian package fortunes (./setup.sh)" >&2; exit 2; }

heft_run() {  # $1: sharded_data_parallel_degree
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model gpt \
    --batch_size 16 --max_steps "$steps" --lr 0.001 --lr_schedule constant --eval false \
    --log_every 100000 --sharded_data_parallel_degree "$1" |
    sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p'
}
torch_run() {
  "$python" "$peer" --ranks 2 --batch 16 --steps "$steps" --threads 1 --log_every 100000 |
    sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p' | tail -n 1
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# gpt_vs_torch: gpt 4x128, 2 ranks, 16 x 128 bytes per step, $steps steps, $rounds rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round impl tokens_per_s"
ddp_all="" sharded_all="" torch_all=""
i=1
while [ "$i" -le "$rounds" ]; do
  d=$(heft_run 1); echo "$i heft_ddp $d"
  s=$(heft_run 2); echo "$i heft_sharded $s"
  t=$(torch_run); echo "$i pytorch_ddp $t"
  ddp_all="$ddp_all $d"; sharded_all="$sharded_all $s"; torch_all="$torch_all $t"
  i=$((i + 1))
done
dm=$(echo "$ddp_all" | tr ' ' '\n' | grep . | median)
sm=$(echo "$sharded_all" | tr ' ' '\n' | grep . | median)
tm=$(echo "$torch_all" | tr ' ' '\n' | grep . | median)
echo "median heft_ddp=$dm heft_sharded=$sm pytorch_ddp=$tm"
echo "ratio heft_ddp/pytorch_ddp=$(awk -v a="$dm" -v b="$tm" 'BEGIN { printf "%.2f", a / b }') heft_sharded/heft_ddp=$(awk -v a="$sm" -v b="$dm" 'BEGIN { printf "%.2f", a / b }')"
