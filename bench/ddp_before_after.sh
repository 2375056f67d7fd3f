#!/usr/bin/env bash
# DDP on two builds of heft in one run (a change's before and after), alternating the builds
# within every round so both see the same machine state:
#   heft-train   heft-train's CNN under `heft run -n 2` (global batch 64, 12800 samples)
#   python-cnn   PyTorch DDP on backend heft: the shared peer harness's CNN
#                (../shared/peers/ddp_torch.py, global batch 64, 12800 samples, 2 ranks)
#   python-gpt   the same harness's small GPT (gpt_torch.py, global batch 16, 60 steps)
# Each build runs its own binaries and its own Python package ($BUILD/python). Prints every
# run, then per workload the median and the worst round of each build and after/before.
#
#   bench/ddp_before_after.sh --before DIR --after DIR [--rounds 5] [--before-env 'VAR=V ...']
#     DIR: a build folder with heft, heft-train, memory_bandwidth_bench and python/heft
#     (the before one built from the older commit, e.g. in a `git worktree`)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/before_after.sh 5 "$@"
py=${PYTHON:-.venv/bin/python}
peers=${HEFT_PEERS:-../shared/peers}
[[ -f $peers/ddp_torch.py && -f $peers/gpt_torch.py ]] ||
  { echo "ddp_before_after: $peers/ddp_torch.py or gpt_torch.py not found" >&2; exit 2; }
port=$((29500 + RANDOM % 150))

before_after_header
echo "# round build workload samples_or_tokens_per_s"

run() {  # build workload side -> throughput
  local b=$1 w=$2 side=$3
  case "$w" in
    heft-train)
      side_env "$side" "$b/heft" run --hosts 1 -n 2 -- "$b/heft-train" --model cnn --batch_size 64 --limit 12800 \
        --lr 0.01 --momentum 0.9 --eval false --log_every 100000 2>/dev/null |
        sed -n 's/.*final: .*samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1 ;;
    python-cnn)
      side_env "$side" PYTHONPATH="$b/python" $py "$peers/ddp_torch.py" --ranks 2 --batch 64 --limit 12800 --threads 1 \
        --backend heft --port $((port++)) 2>/dev/null | sed -n 's/.*samples_per_s=\([0-9.]*\).*/\1/p' | tail -n 1 ;;
    python-gpt)
      side_env "$side" PYTHONPATH="$b/python" $py "$peers/gpt_torch.py" --ranks 2 --batch 16 --steps 60 --threads 1 \
        --backend heft --port $((port++)) 2>/dev/null | sed -n 's/^final:.*tokens_per_s=\([0-9.]*\).*/\1/p' | tail -n 1 ;;
  esac
}

rows=""
for r in $(seq "$rounds"); do
  for w in heft-train python-cnn python-gpt; do
    # Alternate which build goes first, round by round.
    if (( r % 2 )); then order="before after"; else order="after before"; fi
    for side in $order; do
      if [[ $side == before ]]; then b=$before; else b=$after; fi
      v=$(run "$b" "$w" "$side")
      [[ -n $v ]] || { echo "ddp_before_after: $side $w gave no throughput" >&2; exit 1; }
      echo "$r $side $w $v"
      rows+="$r $side $w $v"$'\n'
    done
  done
done

ROWS="$rows" python3 - <<'PY'
import collections, os, statistics
by = collections.defaultdict(dict)
for line in os.environ["ROWS"].strip().split("\n"):
    r, side, w, v = line.split()
    by[(w, side)][int(r)] = float(v)
print("\n| workload | before median | before worst | after median | after worst | after/before median | worst round's after/before |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for w in ("heft-train", "python-cnn", "python-gpt"):
    b, a = by[(w, "before")], by[(w, "after")]
    per_round = [a[r] / b[r] for r in a]
    print(f"| {w} | {statistics.median(b.values()):.0f} | {min(b.values()):.0f} | "
          f"{statistics.median(a.values()):.0f} | {min(a.values()):.0f} | "
          f"{statistics.median(a.values()) / statistics.median(b.values()):.2f}x | {min(per_round):.2f}x |")
PY
