#!/usr/bin/env bash
# heft.torch.parallel.tensor_parallel (your own PyTorch model, split by a plan) against
# heft-train's C++ tensor strategy, on the same GPT and layout: heft-train's GPT (n_layer 4,
# n_embd 512, 8 heads, byte vocabulary, untied head, GELU tanh) written in plain PyTorch,
# split by the Megatron plan (vocab embedding and head, q/k/v and fc colwise, proj and out
# rowwise, vocab-parallel cross-entropy) over tensor 2 on 2 ranks, against heft-train
# --tensor_parallel_degree 2 (the same C++ layers, in C++), AdamW, no gradient clipping,
# 16 x 128 bytes per step, one thread per rank; one run each. Prints the machine (CPU,
# memcpy GB/s) first, then per side the step seconds after 2 warm-up steps: median and worst,
# and the Python / C++ ratio of the medians (the Python overhead; issue 28 asks <= 1.15).
# heft-train's step time is its per-step rate (--log_every 1): 16 / samples_per_s.
#
#   bench/tensor_parallel_python.sh [--steps 30]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=30
while [[ $# -gt 0 ]]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N]" >&2; exit 2 ;;
  esac
done
HEFT=build/heft PY=.venv/bin/python
[[ -x $HEFT && -x build/heft-train && -f build/python/heft/torch/_tensor_parallel.py ]] || {
  echo "$0: build heft, heft-train and heft_python_c10d first" >&2; exit 1; }
cpu() { grep -m1 "$1" /proc/cpuinfo | cut -d: -f2 | xargs; }
echo "# machine: $(nproc) cores, $(cpu 'model name'); torch $($PY -c 'import torch; print(torch.__version__)'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# date: $(date -u +%Y-%m-%dT%H:%MZ)  steps=$STEPS gpt n_layer=4 n_embd=512 n_head=8 batch=16x128 tensor=2 on 2 ranks"
if [[ -x build/memory_bandwidth_bench ]]; then
  echo "# memcpy GB/s (build/memory_bandwidth_bench, one core): $(build/memory_bandwidth_bench --benchmark_filter='BM_Memcpy/(1048576|4194304)$' --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null | awk -F, '/^"?BM_Memcpy/{gsub(/"/,"",$1); split($1,a,"/"); printf "%s: %.1f  ", a[2], $6/1e9}')"
fi
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat >"$DIR/tp_gpt.py" <<'EOF'
import math, statistics, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
import heft.torch.distributed as hdist
from heft.torch.parallel import DeviceMesh, tensor_parallel, vocab_parallel_cross_entropy

class Block(nn.Module):  # heft-train's GptBlock (src/heft/train/gpt.cc)
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

steps = int(sys.argv[1])
hdist.init_process_group()
mesh = DeviceMesh(tensor=2)
torch.manual_seed(0)
plan = {"tok": "vocab", "blocks.*.qkv": "colwise", "blocks.*.proj": "rowwise",
        "blocks.*.fc": "colwise", "blocks.*.out": "rowwise", "head": "vocab"}
model = tensor_parallel(GPT(), plan, mesh)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times = []
for step in range(steps):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(0, 256, (16, 129), generator=g)
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss = vocab_parallel_cross_entropy(model(idx[:, :-1]), idx[:, 1:], mesh)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
    print(f"step={step + 1} loss={loss.item():.4f} step_s={times[-1]:.4f}", flush=True)
EOF
median_worst() {  # step seconds on stdin, one a line, after 2 warm-up steps -> "median worst"
  tail -n +3 | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.4f %.4f", m, v[NR] }'
}
LOG=$DIR/log
if ! OMP_NUM_THREADS=1 $HEFT run --hosts 1 -n 2 -- build/heft-train --model gpt --n_layer 4 \
    --n_embd 512 --n_head 8 --batch_size 16 --block_size 128 --max_steps "$STEPS" \
    --optimizer adamw --lr 0.001 --grad_clip 0 --lr_schedule constant --eval false \
    --log_every 1 --tensor_parallel_degree 2 >"$LOG" 2>&1; then
  echo "$0: heft-train failed:" >&2; tail -20 "$LOG" >&2; exit 1
fi
read -r cm cw <<<"$(awk '/^\[rank 0\] step=/ { for (i = 1; i <= NF; i++) if ($i ~ /^samples_per_s=/) { sub(/samples_per_s=/, "", $i); printf "%.6f\n", 16 / $i } }' "$LOG" | median_worst)"
if ! OMP_NUM_THREADS=1 $HEFT run --hosts 1 -n 2 -- $PY -u "$DIR/tp_gpt.py" "$STEPS" >"$LOG" 2>&1; then
  echo "$0: the Python run failed:" >&2; tail -20 "$LOG" >&2; exit 1
fi
read -r pm pw <<<"$(awk '/^\[rank 0\] step=/ { for (i = 1; i <= NF; i++) if ($i ~ /^step_s=/) { sub(/step_s=/, "", $i); print $i } }' "$LOG" | median_worst)"
echo
echo "| side | step s median | step s worst | median / C++'s |"
echo "| --- | --- | --- | --- |"
echo "| heft-train C++ tensor 2 | $cm | $cw | 1.00 |"
echo "| Python tensor_parallel 2 | $pm | $pw | $(awk -v a="$pm" -v b="$cm" 'BEGIN { printf "%.2f", a / b }') |"
