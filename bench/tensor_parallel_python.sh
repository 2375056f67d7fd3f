#!/usr/bin/env bash
# heft.torch.parallel.tensor_parallel (your own PyTorch model, split by a plan) against
# heft-train's C++ tensor strategy and against torch's DTensor tensor parallelism, on the same
# GPT and layout: heft-train's GPT (n_layer 4, n_embd 512, 8 heads, byte vocabulary, untied
# head, GELU tanh) written in plain PyTorch, split by the Megatron plan (vocab embedding and
# head, q/k/v and fc colwise, proj and out rowwise, vocab-parallel cross-entropy) over tensor 2
# on 2 ranks, against heft-train --tensor_parallel_degree 2 (the same C++ layers, in C++) and
# against bench/dtensor_tp.py (the same model, seed and batches under parallelize_module with
# ColwiseParallel/RowwiseParallel in that layout and loss_parallel, on Gloo, and the same DTensor
# program on backend heft: dtensor_heft), AdamW, no gradient
# clipping, 16 x 128 bytes per step, one thread per rank. --rounds N runs each side N times,
# the order reversed every other round. Prints the machine (CPU, memcpy GB/s, torch) first, a
# line per run, then per side: the step seconds after 2 warm-up steps (a round's figure is its
# median step; the table gives the median over rounds and the worst round), tokens/s of the
# median, the Python / C++ ratio of the medians (the Python overhead; issue 28 asks <= 1.15),
# heft's tokens/s over DTensor's, and each rank's peak RSS (its largest over rounds) with
# heft / DTensor. heft-train's step time is its per-step rate (--log_every 1): 16 / samples_per_s.
#
#   bench/tensor_parallel_python.sh [--steps 30] [--rounds 3] [--ranks 2]   (tensor = ranks)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=30 ROUNDS=3 RANKS=2 TOKENS=$((16 * 128))
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --ranks) RANKS=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--rounds N] [--ranks 2|4|8]" >&2; exit 2 ;;
  esac
done
[[ $RANKS =~ ^(2|4|8)$ ]] || { echo "$0: --ranks $RANKS: expected 2, 4 or 8 (dividing 8 heads)" >&2; exit 2; }
[[ $STEPS =~ ^[0-9]+$ && $STEPS -ge 3 && $ROUNDS =~ ^[0-9]+$ && $ROUNDS -ge 1 ]] || {
  echo "$0: --steps must be >= 3 (2 warm-up steps) and --rounds >= 1" >&2; exit 2; }
HEFT=build/heft PY=.venv/bin/python
[[ -x $HEFT && -x build/heft-train && -f build/python/heft/torch/parallel/tensor/__init__.py ]] || {
  echo "$0: build heft, heft-train and heft_python_c10d first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'); torch $($PY -c 'import torch; print(torch.__version__)'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  steps=$STEPS rounds=$ROUNDS gpt n_layer=4 n_embd=512 n_head=8 batch=16x128 tensor=$RANKS on $RANKS ranks"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat >"$DIR/tp_gpt_model.py" <<'EOF'
"""heft-train's GPT (src/heft/train/gpt.cc) in plain PyTorch and the benchmark's batches, for
every Python side of bench/tensor_parallel_python.sh."""
import math
import torch, torch.nn as nn, torch.nn.functional as F

class Block(nn.Module):  # heft-train's GptBlock
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2)
                   for z in self.qkv(self.ln1(x)).chunk(3, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        h = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, -1))
        return h + self.out(F.gelu(self.fc(self.ln2(h)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self, layers=4, d=512, heads=8, block=128, vocab=256):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))

def batch(step):  # (16, 129) bytes: inputs [:, :-1], targets [:, 1:]
    return torch.randint(0, 256, (16, 129), generator=torch.Generator().manual_seed(step))
EOF
cat >"$DIR/tp_gpt.py" <<'EOF'
import resource, sys, time
import torch
import heft.torch.distributed as hdist
from heft.torch.parallel import DeviceMesh, tensor_parallel, vocab_parallel_cross_entropy
from tp_gpt_model import GPT, batch

steps = int(sys.argv[1])
hdist.init_process_group()
mesh = DeviceMesh(tensor=hdist.get_world_size())
torch.manual_seed(0)
plan = {"tok": "vocab", "blocks.*.qkv": "colwise", "blocks.*.proj": "rowwise",
        "blocks.*.fc": "colwise", "blocks.*.out": "rowwise", "head": "vocab"}
model = tensor_parallel(GPT(), plan, mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times = []
for step in range(steps):
    idx = batch(step)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = vocab_parallel_cross_entropy(model(idx[:, :-1]), idx[:, 1:], mesh)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
    print(f"step={step + 1} loss={loss.item():.4f} step_s={times[-1]:.4f}", flush=True)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
print(f"memory: rank={hdist.get_rank()} peak_rss_mb={peak:.1f}", flush=True)
EOF
median_worst() {  # numbers on stdin, one a line -> "median worst"
  sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f", m, v[NR] }'
}
step_seconds() {  # $1 log -> rank 0's step seconds, one a line, from step=N lines
  awk '/^\[rank 0\] step=/ { for (i = 1; i <= NF; i++) {
         if ($i ~ /^step_s=/) { sub(/step_s=/, "", $i); print $i }
         if ($i ~ /^samples_per_s=/) { sub(/samples_per_s=/, "", $i); printf "%.6f\n", 16 / $i } } }' "$1"
}
last_loss() { awk '/^\[rank 0\] step=/ { for (i = 1; i <= NF; i++) if ($i ~ /^loss=/) l = substr($i, 6) } END { print (l == "" ? "-" : l) }' "$1"; }
rss() {  # $1 log -> each rank's peak_rss_mb in rank order, space-separated
  awk '/memory: rank=/ { split($0, a, "rank="); split(a[2], b, " "); split($0, c, "peak_rss_mb="); m[b[1] + 0] = c[2] + 0 }
       END { for (r = 0; r < '"$RANKS"'; r++) printf "%s%s", (r ? " " : ""), (r in m ? m[r] : "-") }' "$1"
}
SIDES=(cpp heft dtensor dtensor_heft)
declare -A NAME=([cpp]="heft-train C++ tensor $RANKS" [heft]="heft Python tensor_parallel $RANKS"
                 [dtensor]="DTensor parallelize_module $RANKS (Gloo)"
                 [dtensor_heft]="DTensor parallelize_module $RANKS (heft)")
run_side() {  # $1 side, $2 round: runs it, appends "median loss rss0 rss1 ..." to $DIR/$1
  local log=$DIR/log.$1 cmd
  case "$1" in
    cpp) cmd=(build/heft-train --model gpt --n_layer 4 --n_embd 512 --n_head 8 --batch_size 16
              --block_size 128 --max_steps "$STEPS" --optimizer adamw --lr 0.001 --grad_clip 0
              --lr_schedule constant --eval false --log_every 1 --tensor_parallel_degree "$RANKS") ;;
    heft) cmd=($PY -u "$DIR/tp_gpt.py" "$STEPS") ;;
    dtensor) cmd=($PY -u bench/dtensor_tp.py "$STEPS") ;;
    dtensor_heft) cmd=($PY -u bench/dtensor_tp.py "$STEPS" heft) ;;
  esac
  if ! OMP_NUM_THREADS=1 PYTHONPATH="$DIR${PYTHONPATH:+:$PYTHONPATH}" \
      $HEFT run --hosts 1 -n "$RANKS" -- "${cmd[@]}" >"$log" 2>&1; then
    echo "$0: ${NAME[$1]} failed (round $2):" >&2; tail -20 "$log" >&2; exit 1
  fi
  local m
  read -r m _ <<<"$(step_seconds "$log" | tail -n +3 | median_worst)"
  echo "$m $(last_loss "$log") $(rss "$log")" >>"$DIR/$1"
  echo "# round $2: ${NAME[$1]}: step s median $m, loss $(last_loss "$log"), peak RSS MiB by rank $(rss "$log")"
}
for ((round = 1; round <= ROUNDS; round++)); do
  order=("${SIDES[@]}")
  ((round % 2)) || order=(dtensor_heft dtensor heft cpp)
  for side in "${order[@]}"; do run_side "$side" "$round"; done
done
declare -A MED WORST
for side in "${SIDES[@]}"; do
  read -r MED[$side] WORST[$side] <<<"$(cut -d' ' -f1 "$DIR/$side" | median_worst)"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else printf "-" }'; }
tokens() { awk -v s="$1" -v n="$TOKENS" 'BEGIN { printf "%.0f", n / s }'; }
echo
echo "| side | step s median | step s worst round | tokens/s | median / C++'s | tokens/s / DTensor's (Gloo) | tokens/s / DTensor's (heft) | loss at step $STEPS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for side in "${SIDES[@]}"; do
  echo "| ${NAME[$side]} | ${MED[$side]} | ${WORST[$side]} | $(tokens "${MED[$side]}") | $(ratio "${MED[$side]}" "${MED[cpp]}") | $(ratio "${MED[dtensor]}" "${MED[$side]}") | $(ratio "${MED[dtensor_heft]}" "${MED[$side]}") | $(tail -1 "$DIR/$side" | cut -d' ' -f2) |"
done
echo
head="| side |" rule="| --- |"
for ((r = 0; r < RANKS; r++)); do head+=" rank $r peak RSS MiB |"; rule+=" --- |"; done
echo "$head largest / DTensor's |"
echo "$rule --- |"
peaks() {  # $1 side -> each rank's largest peak over rounds, then the largest of them
  awk -v n="$RANKS" '{ for (r = 0; r < n; r++) if ($(3 + r) > p[r]) p[r] = $(3 + r) }
    END { for (r = 0; r < n; r++) { printf "%.1f ", p[r]; if (p[r] > m) m = p[r] }; printf "%.1f", m }' "$DIR/$1"
}
dmax=$(peaks dtensor | awk '{ print $NF }')
for side in "${SIDES[@]}"; do
  read -ra p <<<"$(peaks "$side")"
  row="| ${NAME[$side]} |"
  for ((r = 0; r < RANKS; r++)); do row+=" ${p[r]} |"; done
  echo "$row $(ratio "${p[RANKS]}" "$dmax") |"
done
