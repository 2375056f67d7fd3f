#!/usr/bin/env bash
# The automatic layout against every layout, measured (issue 33's must-show): on 4 ranks of
# this host (heft run -n 4, one thread each), four small GPTs (deep+narrow, wide+shallow, two
# heavy vocabulary heads) x two memory limits (one admitting plain DDP, one not).
#
# Per shape:
#  1. heft-train --auto_layout true with a generous limit prints the search's whole ranked
#     table on the run's own measured comm table and profile (HEFT_LAYOUT_TOP=1000); its
#     memory column sets the two limits: "ddp" = the generous one (plain DDP fits), "tight" =
#     halfway between the smallest memory any layout needs and the smallest plain DDP needs
#     (plain DDP does not fit, others do). Its layout trials run (as --trials says), and
#     their calibration (measured / predicted, the median of the runoff's layouts) scales the
#     whole table: each row's "cal ms" is its prediction x that scale.
#  2. Per limit, each degree combination (data x sharded x tensor x pipeline = 4) the search
#     ranks is run once, with the micro-batches, virtual stages and checkpointing the search
#     ranks best for it within that limit (the table's first row of that combination whose
#     predicted memory fits), for --steps steps (default 10: 9 timed after the first),
#     --repeats times (default 2): the fastest run's median step wall time after the first
#     (heft-train's step_time: line), the spread of the runs' medians (max / min - 1: the
#     noise, to read the differences against), and every rank's peak RSS over the runs
#     (getrusage, heft-train's memory: lines). A row both limits pick runs once.
#  3. Per limit, auto (heft-train --auto_layout true --memory_limit_gb L, its layout trials
#     on: docs/auto-layout.md) runs --repeats times, each an independent choice: its trial
#     lines, the layout it chose, its own measured step. A chosen layout that step 2 did not
#     run is run as a row then ("+" before its name). "row/best" is the chosen layout's row
#     over the fastest row within that limit, "+" rows included (the choice, measured beside
#     the others);
#     "own/best" auto's own run over that row, "own/row" auto's own run over its layout's row.
# Prints: the machine (CPU, cores, memcpy GB/s, load average), then per shape step 1's trials,
# runoff and calibration, the table of layouts (predicted ms, calibrated ms, measured ms,
# spread, |pred - meas| / meas raw and calibrated, "in": T when step 1 tried the layout, R when
# it also ran off, predicted memory, peak RSS max over ranks), then per (shape, limit, repeat)
# auto's trials, runoff and choice, its times (predicted, calibrated by its own trials,
# measured), the best, the ratios, and whether auto's peak RSS stayed under the limit (ranks
# 1-3, and rank 0 apart: it also profiled the whole model and ran the trials); last the median
# prediction error over every run, raw and calibrated, and calibrated over the rows step 1 did
# not try (out of sample: the scale was not fitted on them), how many choices were within 10%
# of the best, and the seconds the trials and the runoff took per auto run.
#
#   bench/auto_layout.sh [--steps 10] [--repeats 2] [--trials K] [--shapes a,b]
# --trials K: auto (and step 1) runs with --auto_layout_trials K (default: heft-train's, 6).
# --shapes: only these shapes (deep+narrow, wide+shallow, vocab-head, vocab-50k: GPT-2's 50,257-token
# vocabulary, whose odd size leaves no tensor split; default all four).
# HEFT_BIN=DIR runs DIR/heft and DIR/heft-train (a copy, while others rebuild build/).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=10
REPEATS=2
TRIALS=
ONLY=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --trials) TRIALS=$2; shift 2 ;;
    --shapes) ONLY=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--repeats N] [--trials K] [--shapes a,b]" >&2; exit 2 ;;
  esac
done
BIN=${HEFT_BIN:-build}
[[ -x $BIN/heft && -x $BIN/heft-train ]] || { echo "$0: build heft and heft-train first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  4 ranks (heft run -n 4), OMP_NUM_THREADS=1, steps=$STEPS, repeats=$REPEATS, trials=${TRIALS:-default}, batch 8"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
BIN=$BIN STEPS=$STEPS REPEATS=$REPEATS TRIALS=$TRIALS ONLY=$ONLY exec .venv/bin/python - <<'EOF'
import os, re, statistics, subprocess, sys

STEPS = int(os.environ["STEPS"])
REPEATS = max(1, int(os.environ["REPEATS"]))
TRIALS = f" --auto_layout_trials {os.environ['TRIALS']}" if os.environ.get("TRIALS") else ""
BIN = os.environ["BIN"]
SHAPES = {  # name: heft-train's gpt hyperparameters
    "deep+narrow": "--n_layer 12 --n_embd 192 --n_head 4 --block_size 32 --vocab 256",
    "wide+shallow": "--n_layer 2 --n_embd 512 --n_head 8 --block_size 32 --vocab 256",
    "vocab-head": "--n_layer 2 --n_embd 128 --n_head 4 --block_size 32 --vocab 32768",
    "vocab-50k": "--n_layer 2 --n_embd 128 --n_head 4 --block_size 32 --vocab 50257",
}
if os.environ.get("ONLY"):
    unknown = set(os.environ["ONLY"].split(",")) - set(SHAPES)
    if unknown:
        sys.exit(f"--shapes: unknown {sorted(unknown)}; expected some of {list(SHAPES)}")
    SHAPES = {k: v for k, v in SHAPES.items() if k in os.environ["ONLY"].split(",")}
COMMON = f"--model gpt --batch_size 8 --max_steps {STEPS} --eval false --log_every 1000 --seed 1"
GENEROUS_GB = 8.0
ROW = re.compile(r"^\s*\d+\s+([0-9.]+)\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+ [kMG]?B)\s+([0-9.]+ [kMG]?B)\s+"
                 r"data (\d+) x sharded (\d+) x tensor (\d+) x pipeline (\d+), m (\d+), v (\d+), ckpt (\w+)")
UNIT = {"B": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def run(args, env=None):
    cmd = f"{BIN}/heft run -n 4 -- {BIN}/heft-train {COMMON} {args}"
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    p = subprocess.run(cmd, shell=True, capture_output=True, text=True, env=e, timeout=600)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {cmd}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    out = p.stdout
    step = re.search(r"step_time: median_s=([0-9.]+)", out)
    # peak_rss_mb is MiB (ru_maxrss KiB / 1024); the limit and predictions are GB (10^9 bytes).
    rss = {int(r): float(x) * 1.048576 / 1e3 for r, x in re.findall(r"memory: rank=(\d+) peak_rss_mb=([0-9.]+)", out)}
    return out, float(step.group(1)), rss  # s, {rank: GB}


def run_fastest(args):
    """run() REPEATS times: the fastest median step, the spread of the medians (max / min - 1),
    each rank's largest peak RSS."""
    steps, peaks = [], {}
    for _ in range(REPEATS):
        _, step, rss = run(args)
        steps.append(step)
        for r, v in rss.items():
            peaks[r] = max(peaks.get(r, 0.0), v)
    return min(steps), max(steps) / min(steps) - 1, peaks


def table(out):
    rows = []
    for line in out.splitlines():
        line = re.sub(r"^\[rank \d+\] ", "", line)
        m = ROW.match(line)
        if m:
            gb = [float(x.split()[0]) * UNIT[x.split()[1]] / 1e9 for x in (m.group(2), m.group(3))]
            rows.append(dict(pred_s=float(m.group(1)) / 1e3, mem_gb=gb[0], own_gb=gb[1],
                             key=tuple(int(m.group(i)) for i in range(4, 10)), ckpt=m.group(10) != "off"))
    return rows


def args_of(r):
    d, s, t, p, m, v = r["key"]
    a = f"--sharded_data_parallel_degree {s} --tensor_parallel_degree {t} --partitions {p} "
    a += f"--microbatches {m} --virtual_stages {v}" if p > 1 else f"--gradient_accumulation {m}"
    return a + (" --activation_checkpointing true" if r["ckpt"] else "")


def name(r):
    d, s, t, p, m, v = r["key"]
    return f"d{d} s{s} t{t} p{p} m{m} v{v}{' ckpt' if r['ckpt'] else ''}"


def auto_choice(out):
    """The run's final layout: line (the one with measured_step_s): key, ckpt, predicted s,
    calibrated s (0: none), trial, trials; and rank 0's trial, runoff and calibration lines."""
    m = re.findall(r"layout: data=(\d+) sharded=(\d+) tensor=(\d+) pipeline=(\d+) microbatches=(\d+) "
                   r"virtual_stages=(\d+) checkpointing=([01]) predicted_step_s=([0-9.]+) (.*)measured_step_s=.* "
                   r"trial=(\d+) trials=(\d+)", out)[-1]
    cal = re.search(r"calibrated_step_s=([0-9.]+)", m[8])
    lines = re.findall(r"^\[rank 0\] (layout (?:trial \d|runoff|trials: calibration).*)$", out, re.M)
    return (tuple(int(x) for x in m[:6]), m[6] == "1", float(m[7]), float(cal.group(1)) if cal else 0.0,
            int(m[9]), int(m[10]), lines)


def trial_info(out):
    """Step 1's trials: the calibration scale (0: none), the layouts tried and those that ran
    off (short names), the seconds the trials and the runoff took (0, 0: none)."""
    scale = re.search(r"^\[rank 0\] layout trials: calibration x([0-9.]+) .*; trials ([0-9.]+) s, runoff ([0-9.]+) s",
                      out, re.M)
    tried = set(re.findall(r"^\[rank 0\] layout trial \d+/\d+: (.*?) predicted", out, re.M))
    ran_off = set(re.findall(r"^\[rank 0\] layout runoff \d+/\d+: (.*?) \(trial", out, re.M))
    if not scale:
        return 0.0, tried, ran_off, 0.0, 0.0
    return float(scale.group(1)), tried, ran_off, float(scale.group(2)), float(scale.group(3))


errors, choices = [], []  # choices: (row/best, own/best)
memory = []  # per row run: the largest peak RSS over the ranks / the prediction for ranks that did not profile
memory_auto = []  # per auto run: (rank 0's peak / the prediction, ranks 1-3's largest / theirs)
cal_errors, out_of_sample = [], []  # calibrated: every run; rows step 1 did not try
phase_s = []  # per auto run: (trials s, runoff s)
for shape, hp in SHAPES.items():
    out, _, _ = run(f"{hp} --auto_layout true --memory_limit_gb {GENEROUS_GB}{TRIALS}", {"HEFT_LAYOUT_TOP": "1000"})
    rows = table(out)
    scale, tried, ran_off, _, _ = trial_info(out)
    step1 = re.findall(r"^\[rank 0\] (layout (?:trial \d|runoff|trials: calibration).*)$", out, re.M)
    ddp = min(r["mem_gb"] for r in rows if r["key"][1:4] == (1, 1, 1))
    least = min(r["mem_gb"] for r in rows)
    limits = {"ddp": GENEROUS_GB, "tight": (least + ddp) / 2}
    print(f"\n## {shape}: {hp}  (limits: ddp {limits['ddp']:.3f} GB, tight {limits['tight']:.3f} GB;"
          f" plain DDP needs {ddp:.3f} GB, the smallest layout {least:.3f} GB)")
    for line in step1:
        print(f"  step 1: {line}")
    if not scale:
        print("  step 1: no calibration (no trials ran): calibrated = predicted")
    print(f"{'layout':28} {'pred ms':>8} {'cal ms':>8} {'meas ms':>8} {'spread':>7} {'err':>6} {'cal err':>7} {'in':>3}"
          f" {'pred GB':>8} {'w/o prof':>8} {'rss GB':>7} {'rss/pred':>8}")
    measured = {}  # (key, ckpt) -> (row, step s, rss GB)
    fits = {label: {} for label in limits}  # per limit: degrees -> the fastest row that fits
    for label, limit in limits.items():
        for r in rows:  # ranked fastest first
            if r["mem_gb"] <= limit:
                fits[label].setdefault(r["key"][:4], r)

    def measure_row(r, extra=""):
        k = (r["key"], r["ckpt"])
        if k not in measured:
            step, spread, ranks = run_fastest(f"{hp} {args_of(r)}")
            rss = max(ranks.values())
            err = abs(r["pred_s"] - step) / step
            cal_s = r["pred_s"] * (scale or 1)
            cal_err = abs(cal_s - step) / step
            errors.append(err)
            cal_errors.append(cal_err)
            tag = "R" if name(r) in ran_off else "T" if name(r) in tried else ""
            if not tag:
                out_of_sample.append(cal_err)
            measured[k] = (r, step, rss)
            memory.append(rss / r["own_gb"])  # a run given its layout: no rank profiled
            print(f"{extra + name(r):28} {r['pred_s']*1e3:8.1f} {cal_s*1e3:8.1f} {step*1e3:8.1f} {spread*100:6.1f}%"
                  f" {err*100:5.0f}% {cal_err*100:6.0f}% {tag:>3} {r['mem_gb']:8.3f} {r['own_gb']:8.3f} {rss:7.3f}"
                  f" {rss / r['own_gb']:8.2f}")
        return measured[k][1]

    for label in limits:
        for r in fits[label].values():
            measure_row(r)
    for label, limit in limits.items():
        for rep in range(REPEATS):
            out, step, ranks = run(f"{hp} --auto_layout true --memory_limit_gb {limit:.4f}{TRIALS}")
            rss = max(v for r, v in ranks.items() if r != 0)  # rank 0 also profiled the whole model
            rss0 = ranks[0]
            key, ckpt, pred, cal, trial, of, trials = auto_choice(out)
            row = next((r for r in rows if r["key"] == key and r["ckpt"] == ckpt), None)
            row_s = measure_row(row, "+") if row else step
            # The best row within the limit, "+" rows included (one auto chose earlier counts).
            best_s, best = min((t, name(r)) for r, t, _ in measured.values() if r["mem_gb"] <= limit)
            choices.append((row_s / best_s, step / best_s))
            errors.append(abs(pred - step) / step)
            cal_errors.append(abs((cal or pred) - step) / step)
            _, _, _, trials_s, runoff_s = trial_info(out)
            phase_s.append((trials_s, runoff_s))
            if row:
                memory_auto.append((rss0 / row["mem_gb"], rss / row["own_gb"]))
            layout = f"d{key[0]} s{key[1]} t{key[2]} p{key[3]} m{key[4]} v{key[5]}{' ckpt' if ckpt else ''}"
            for t in trials:
                print(f"  {t}")
            print(f"auto, limit {label} {limit:.3f} GB, run {rep + 1}: {layout} (trial {trial} of {of}) predicted"
                  f" {pred*1e3:.1f} ms, calibrated {cal*1e3:.1f} ms, own run {step*1e3:.1f} ms, its row {row_s*1e3:.1f} ms; best row within the"
                  f" limit {best} {best_s*1e3:.1f} ms; row/best {row_s/best_s:.2f}, own/best {step/best_s:.2f},"
                  f" own/row {step/row_s:.2f}; peak RSS ranks 1-3 {rss:.3f} GB"
                  f" ({'under' if rss <= limit else 'OVER'} the limit), rank 0 {rss0:.3f} GB (profile and trials"
                  f" included, {'under' if rss0 <= limit else 'OVER'})")
within = sum(1 for r, _ in choices if r <= 1.10)
own_within = sum(1 for _, o in choices if o <= 1.10)
print(f"\n# median |predicted - measured| / measured over {len(errors)} runs: {statistics.median(errors)*100:.0f}% raw,"
      f" {statistics.median(cal_errors)*100:.0f}% calibrated (rows: step 1's scale; auto: its own calibrated_step_s);"
      f" calibrated over the {len(out_of_sample)} rows step 1 did not try (out of sample):"
      f" {statistics.median(out_of_sample)*100 if out_of_sample else float('nan'):.0f}%")
print(f"# auto's choice within 10% of the best row: {within} of {len(choices)} by its row (worst"
      f" {max(r for r, _ in choices):.2f}), {own_within} of {len(choices)} by its own run (worst"
      f" {max(o for _, o in choices):.2f})")
if memory:
    inside = sum(1 for x in memory if 0.9 <= x <= 1.1)
    print(f"# memory, rows (peak RSS, largest over the ranks / predicted w/o profile): {min(memory):.2f}-"
          f"{max(memory):.2f}, median {statistics.median(memory):.2f}; within 10%: {inside} of {len(memory)}")
if memory_auto:
    print("# memory, auto runs (rank 0 / predicted; ranks 1-3 / predicted w/o profile): " +
          ", ".join(f"{a:.2f} {b:.2f}" for a, b in memory_auto))
if phase_s:
    t_s, r_s = sorted(t for t, _ in phase_s), sorted(r for _, r in phase_s)
    print(f"# per auto run: trials {statistics.median(t_s):.1f} s median ({t_s[0]:.1f}-{t_s[-1]:.1f}), runoff"
          f" {statistics.median(r_s):.1f} s median ({r_s[0]:.1f}-{r_s[-1]:.1f})")
print(f"# load at the end: {open('/proc/loadavg').read().split()[:3]}")

EOF
