#!/usr/bin/env bash
# heft's tuner against Optuna 3.1 (Debian's python3-optuna), in one run: Branin (2-D, optimum
# 0.397887) and Hartmann6 (6-D, optimum -3.32237), N seeds, T trials each; heft Random,
# Bayesian and Bayesian with 4 suggestions in flight (build/tune_driver, the library API)
# against Optuna's TPE and random samplers (../shared/peers/tune_optuna.py). Prints the median
# simple regret (best - optimum) at 10, 25 and 50 trials for each, the targets (heft Bayesian
# <= half of TPE's at 25 and 50 on both functions; the parallel variant <= TPE's), and heft's
# time per suggestion at the last budget.
#
#   bench/tune_vs_optuna.sh [--seeds 20] [--trials 50]
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=20 TRIALS=50
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) SEEDS=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    *) echo "usage: $0 [--seeds N] [--trials N]" >&2; exit 2 ;;
  esac
done
PEERS=${HEFT_PEERS:-../shared/peers}
[[ -x build/tune_driver ]] || { echo "$0: build/tune_driver missing: run ./setup.sh first" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'); date: $(date -u +%Y-%m-%dT%H:%MZ); seeds=$SEEDS trials=$TRIALS"
echo "# optuna $(.venv/bin/python -c 'import optuna; print(optuna.__version__)')"
build/tune_driver --seeds "$SEEDS" --trials "$TRIALS" >"$OUT/heft"
.venv/bin/python "$PEERS/tune_optuna.py" --seeds "$SEEDS" --trials "$TRIALS" >"$OUT/optuna"
.venv/bin/python - "$OUT/heft" "$OUT/optuna" <<'PY'
import re, sys
rows = {}
for path in sys.argv[1:]:
    for line in open(path):
        if not line.startswith("summary "):
            continue
        kv = dict(p.split("=", 1) for p in line.split()[1:])
        rows.setdefault(kv["function"], {})[kv["strategy"]] = kv
budgets = ["10", "25", "50"]
for fn, by in rows.items():
    print(f"\n## {fn}: median simple regret over seeds (lower is better)")
    print("| strategy | " + " | ".join(f"regret@{b}" for b in budgets) + " | suggest ms@50 |")
    print("| --- | " + " | ".join("---:" for _ in budgets) + " | ---: |")
    for s, kv in by.items():
        print(f"| {s} | " + " | ".join(f"{float(kv.get('regret@' + b, 'nan')):.4g}" for b in budgets)
              + f" | {kv.get('suggest_ms@50', '')} |")
    tpe = by.get("optuna_tpe")
    if not tpe:
        continue
    for s, limit, what in (("heft_bayesian", 0.5, "<= 0.5 x TPE"), ("heft_bayesian_parallel4", 1.0, "<= TPE")):
        if s not in by:
            continue
        for b in ("25", "50"):
            mine, theirs = float(by[s]["regret@" + b]), float(tpe["regret@" + b])
            ok = "met" if mine <= limit * theirs else "NOT met"
            print(f"target {s} regret@{b} {what}: {mine:.4g} vs TPE {theirs:.4g} ({mine / theirs if theirs else float('inf'):.2f}x): {ok}")
PY
