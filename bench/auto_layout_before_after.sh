#!/usr/bin/env bash
# The automatic layout's choice on two builds of heft in one run (a change's before and after),
# alternating the builds within every round so both see the same machine state. Each workload
# is `heft plan` in one process (the default collective costs: only the model's measurement
# and the search differ between builds), planning 4 ranks:
#   gpt-deep, gpt-wide, gpt-vocab  heft-train's GPT, bench/auto_layout.sh's three shapes,
#                                  global batch 16
# each within 2 GB and within a tight limit (about 10% above the smallest any layout needs)
#   resnet18, mlp                  PyTorch layers (bench/plan_models.py; resnet18 is
#                                  torchvision's), through heft.torch.parallel.auto_layout
# Prints every run (the chosen layout, its predicted step and memory, the optimizer's and the
# transient figures the profile measured, the plan's wall seconds), then per workload and
# build the layouts chosen (how often), the median and worst (largest) predicted step, and
# after/before.
#   bench/auto_layout_before_after.sh --before DIR --after DIR [--rounds 3]
#     DIR: a build folder with heft, heft-train, memory_bandwidth_bench and python/heft
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/before_after.sh 3 "$@"
before_after_header
gpt="--batch_size 16 --block_size 32"
declare -A work=(
  [gpt-deep]="--model gpt $gpt --n_layer 12 --n_embd 192 --n_head 4 --vocab 256"
  [gpt-wide]="--model gpt $gpt --n_layer 2 --n_embd 512 --n_head 8 --vocab 256"
  [gpt-vocab]="--model gpt $gpt --n_layer 2 --n_embd 128 --n_head 4 --vocab 32768"
  [resnet18]="--model bench/plan_models.py:resnet18"
  [mlp]="--model bench/plan_models.py:mlp"
)
declare -A tight=([gpt-deep]=0.52 [gpt-wide]=0.56 [gpt-vocab]=0.62 [resnet18]=0.98 [mlp]=0.85)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for name in gpt-deep gpt-wide gpt-vocab resnet18 mlp; do
    for limit in 2 "${tight[$name]}"; do
      for which in before after; do
        dir=${!which}
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086
        out=$(PYTHONPATH=$dir/python "$dir/heft" plan ${work[$name]} -n 4 --memory_limit_gb "$limit" 2>&1) || true
        t1=$(date +%s.%N)
        inputs=$(grep -m1 "^auto_layout: [0-9]* layers\|^auto_layout: .*profiled" <<<"$out" | sed -n 's/.*transient \([^,]*\), optimizer \([^;]*\);.*/transient=\1 optimizer=\2/p' || true)
        layout=$(grep -m1 "^layout:" <<<"$out" || echo "layout: none fits")
        echo "$r $which $name/$limit $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1fs", b-a}') ${inputs// /_} ${layout#layout: }" | tee -a "$log"
      done
    done
  done
done
python3 - "$log" <<'PY'
import collections, re, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split(" ", 5)
    choice = re.sub(r" predicted_step_s.*", "", f[5].strip())
    step = re.search(r"predicted_step_s=([0-9.]+)", f[5])
    runs[(f[2], f[1])].append((choice, float(step.group(1)) if step else float("nan")))
print("\n# workload/limit_gb build: chosen layouts (times), predicted step ms median (worst); after/before")
for key in sorted({k for k, _ in runs}):
    med = {}
    for b in ("before", "after"):
        rows = runs[(key, b)]
        counts = collections.Counter(c for c, _ in rows)
        steps = [s for _, s in rows]
        med[b] = statistics.median(steps)
        print(f"{key:18} {b:6} " + "; ".join(f"{c} ({n})" for c, n in counts.most_common())
              + f"  {med[b] * 1e3:.1f} ({max(steps) * 1e3:.1f})")
    print(f"{key:18} after/before predicted step {med['after'] / med['before']:.2f}")
PY
