#!/bin/sh
# heft-train (DistributedDataParallel over heft's communicator) against PyTorch DDP on Gloo
# (../shared/peers/ddp_torch.py): the same CNN on Fashion-MNIST, 2 ranks on this machine,
# global batch 64, the first 12800 samples of an epoch, one thread per rank. The two run
# alternately, ROUNDS times each, in one invocation (the machine is shared and noisy);
# prints every run's training samples/s (all ranks, training loop only), the medians and
# their ratio.
#
# usage: bench/ddp_vs_torch.sh [BUILD_DIR]     (default: build; ROUNDS=3, PYTHON=/usr/bin/python3)
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${ROUNDS:-3}
python=${PYTHON:-/usr/bin/python3}
peer=../shared/peers/ddp_torch.py
for f in "$build/heft" "$build/heft-train"; do
  [ -x "$f" ] || { echo "ddp_vs_torch: $f not found; build first (cmake --build $build)" >&2; exit 2; }
done
[ -f "$peer" ] || { echo "ddp_vs_torch: $peer not found" >&2; exit 2; }

heft_run() {
  OMP_NUM_THREADS=1 "$build/heft" run --hosts 1 -n 2 -- "$build/heft-train" --model cnn \
    --batch_size 64 --limit 12800 --lr 0.01 --momentum 0.9 --eval false --log_every 100000 |
    sed -n 's/.*final: .*samples_per_s=\([0-9.]*\).*/\1/p'
}
torch_run() {
  "$python" "$peer" --ranks 2 --batch 64 --limit 12800 --threads 1 |
    sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "# ddp_vs_torch: cnn, 2 ranks, global batch 64, limit 12800, $rounds rounds; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# round impl samples_per_s"
heft_all="" torch_all=""
i=1
while [ "$i" -le "$rounds" ]; do
  h=$(heft_run); echo "$i heft $h"
  t=$(torch_run); echo "$i pytorch_ddp $t"
  heft_all="$heft_all $h"; torch_all="$torch_all $t"
  i=$((i + 1))
done
hm=$(echo "$heft_all" | tr ' ' '\n' | grep . | median)
tm=$(echo "$torch_all" | tr ' ' '\n' | grep . | median)
echo "median heft=$hm pytorch_ddp=$tm ratio=$(awk -v a="$hm" -v b="$tm" 'BEGIN { printf "%.2f", a / b }')"
