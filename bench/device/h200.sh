#!/usr/bin/env bash
# The GPU check, in one run on the H200 some tasks are lent (/work/.library/device/): builds
# heft against that machine's torch (2.11.0+cu130) and CUDA, runs the CUDA tests, then measures
# heft-train's GPT on the GPU (tokens/s, model FLOPs utilisation against the H200's bf16 peak)
# beside PyTorch's own single-GPU step of the same model, 2 ranks sharing the GPU on backend
# heft against Gloo (bit for bit on a deterministic model, and allreduce time), and
# ShardedDataParallel on CUDA. Sized to end within 9 minutes on that machine from cold.
#
# Here first (needs apt's lists and PyPI):   bench/device/fetch.sh
# then, through the device tool:             run(command: "bash bench/device/h200.sh",
#                                                carry: [".device"], timeout_s: 560)
# Anywhere, as far as it goes without a GPU:  bench/device/h200.sh --dry-run
#   (unpacks the carried packages, configures and builds exactly as there, runs the tests,
#   and stops at the first step that needs a GPU; here the CUDA tests skip, naming why.)
#
# Everything it prints goes to $OUT/h200.log (the device tool brings $OUT back; default
# /tmp/heft-device), the figures, one `name: value` line each, to $OUT/results.txt, and each
# step's own logs (configure, build, every test, every run) into $OUT/logs.tar.gz.
# Options: --dry-run, --jobs N (build; default nproc), --build DIR (default build-device),
#          --prefix DIR (where the .deb files are unpacked; default /tmp/heft-deps),
#          --python PY (the Python with torch; default python3, the GPU machine's; here
#          .venv/bin/python).
# A step that fails is recorded (`step NAME: FAILED rc=N`) and the run goes on to the next
# that does not need it; the exit status is the number of failed steps (0: all passed).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
dry=0 jobs=$(nproc) build=build-device prefix=/tmp/heft-deps py=python3
while (($#)); do
  case $1 in
    --dry-run) dry=1 ;;
    --jobs) jobs=$2; shift ;;
    --build) build=$2; shift ;;
    --prefix) prefix=$2; shift ;;
    --python) py=$2; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "h200.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[[ $py == */* ]] && py=$(cd "$(dirname "$py")" && pwd)/$(basename "$py")
out=${OUT:-/tmp/heft-device}
# Each step's own logs go to $logs, packed into $out/logs.tar.gz at the end (the device tool
# brings back 8 files at most).
logs=${LOGS:-/tmp/heft-device-logs}
rm -rf "$logs" && mkdir -p "$out" "$logs"
exec > >(tee -a "$out/h200.log") 2>&1
results=$out/results.txt
: > "$results"
t0=$(date +%s)
failed=0
result() { echo "$1: $2" | tee -a "$results"; }
elapsed() { echo $(($(date +%s) - t0)); }
# step NAME COMMAND...: runs it, prints its time and outcome.
step() {
  local name=$1; shift
  local s; s=$(date +%s)
  echo "== step $name ($(date -u +%H:%M:%S), $(elapsed) s in)"
  "$@"
  local rc=$?
  if ((rc == 0)); then
    echo "== step $name: ok in $(($(date +%s) - s)) s"
  else
    echo "== step $name: FAILED rc=$rc in $(($(date +%s) - s)) s"
    failed=$((failed + 1))
    result "failed" "$name (rc $rc)"
  fi
  return $rc
}
finish() {
  tar -C "$(dirname "$logs")" -czf "$out/logs.tar.gz" "$(basename "$logs")"
  result "total_seconds" "$(elapsed)"
  result "failed_steps" "$failed"
  echo "h200.sh: done in $(elapsed) s, $failed failed step(s); figures in $results"
  exit "$failed"
}

# ---- the machine -------------------------------------------------------------------------
facts() {
  echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo "cpu: $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader \
    || echo "nvidia-smi: not here"
  command -v nvcc >/dev/null && nvcc --version | tail -n 2 || echo "nvcc: not on PATH"
  "$py" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
}
step facts facts
gpus=$("$py" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
result "gpu" "$(command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 || echo none)"
if ((gpus == 0 && dry == 0)); then
  echo "h200.sh: torch sees no GPU here; going on as --dry-run"
  dry=1
fi

# ---- build dependencies: the carried .deb files, unpacked into a prefix (never over /) ----
deps() {
  local n=0 f
  [[ -d .device/debs ]] || { echo "no .device/debs: run bench/device/fetch.sh here first and carry .device"; return 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  for f in .device/debs/*.deb; do dpkg -x "$f" "$prefix" || return 1; n=$((n + 1)); done
  # pybind11 3.0.1: the one torch 2.11's headers are (one internals for both extensions).
  "$py" -m zipfile -e .device/whl/pybind11-*.whl "$prefix/site" || return 1
  echo "unpacked $n packages into $prefix ($(du -sh "$prefix" | cut -f1)), pybind11 into $prefix/site"
}
step deps deps || finish
export PYTHONPATH=$prefix/site${PYTHONPATH:+:$PYTHONPATH}
export PKG_CONFIG_SYSROOT_DIR=$prefix
export PKG_CONFIG_LIBDIR=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- configure and build against this machine's torch, CUDA and NCCL ---------------------
configure() {
  local torch_cmake pybind_cmake cuda_root="" nccl_args=() py_inc
  torch_cmake=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)') || return 1
  pybind_cmake=$("$py" -c 'import pybind11; print(pybind11.get_cmake_dir())') || return 1
  if command -v nvcc >/dev/null; then cuda_root=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"); fi
  [[ -z $cuda_root && -d /usr/local/cuda ]] && cuda_root=/usr/local/cuda
  # NCCL: the toolkit's where it has one, else the one torch loads (pip's nvidia-nccl-cu13).
  if [[ -n $cuda_root && ! -f $cuda_root/include/nccl.h ]]; then
    local nccl
    nccl=$("$py" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)
    if [[ -n $nccl && -f $nccl/include/nccl.h ]]; then
      nccl_args=(-DHEFT_NCCL_INCLUDE_DIR="$nccl/include" -DHEFT_NCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -n 1)")
    fi
  fi
  py_inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  local with_python=ON
  [[ -f $py_inc/Python.h ]] || { echo "no Python.h under $py_inc: building without heft's Python package"; with_python=OFF; }
  echo "torch: $torch_cmake; CUDA: ${cuda_root:-none}; NCCL: ${nccl_args[*]:-from the toolkit}; Python: $(command -v "$py")"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHEFT_WITH_CUDA=ON \
    -DHEFT_WITH_PYTHON=$with_python -DPython_EXECUTABLE="$(command -v "$py")" \
    ${cuda_root:+-DCUDAToolkit_ROOT="$cuda_root"} "${nccl_args[@]}" \
    -DPKG_CONFIG_EXECUTABLE="$prefix/usr/bin/pkgconf" \
    -DCMAKE_PREFIX_PATH="$prefix/usr;$prefix/usr/share/eigen3/cmake;$torch_cmake;$pybind_cmake" \
    > "$logs/configure.log" 2>&1 || { tail -n 30 "$logs/configure.log"; return 1; }
  grep -E '^-- heft:' "$logs/configure.log"
  # Every Debian dependency must come from the prefix (on a machine that has them under /usr
  # too, CMake could find those instead and the run there would fail).
  local bad
  bad=$(grep -E '^(spdlog|fmt|yaml-cpp|nlohmann_json|CLI11|GTest|benchmark|Eigen3)_DIR:PATH=' "$build/CMakeCache.txt" | grep -v "=$prefix" || true)
  [[ -z $bad ]] || { echo "found outside $prefix:"; echo "$bad"; return 1; }
  echo "Debian dependencies found under $prefix: $(grep -cE '^(spdlog|fmt|yaml-cpp|nlohmann_json|CLI11|GTest|benchmark|Eigen3)_DIR:PATH=' "$build/CMakeCache.txt") packages"
}
step configure configure || finish

targets=(heft heft-train memory_bandwidth_bench gpu_probe_test nccl_dispatch_test staging_test
         gpu_device_test nccl_device_test device_cuda_test hyperparameters_test)
grep -q '^HEFT_WITH_PYTHON:BOOL=ON' "$build/CMakeCache.txt" && targets+=(heft_python_c10d)
build_heft() {
  local s; s=$(date +%s)
  cmake --build "$build" -j "$jobs" --target "${targets[@]}" > "$logs/build.log" 2>&1 \
    || { grep -E 'error|Error' "$logs/build.log" | head -n 30; tail -n 5 "$logs/build.log"; return 1; }
  echo "built ${#targets[@]} targets with -j $jobs"
  result "build_seconds" "$(($(date +%s) - s)) (-j $jobs, ${#targets[@]} targets)"
}
step build build_heft || finish

# ---- tests: the CUDA parts' unit tests here and there; the `cuda` ones pass only there -----
tests() {
  local t rc=0 line
  for t in gpu_probe_test nccl_dispatch_test staging_test hyperparameters_test \
           gpu_device_test nccl_device_test device_cuda_test; do
    "$build/$t" --gtest_brief=1 > "$logs/$t.log" 2>&1
    local r=$?
    line=$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$logs/$t.log" | tr '\n' ' ')
    echo "$t: rc=$r $line"
    grep -A1 ': Skipped$' "$logs/$t.log" | grep -v -e ': Skipped$' -e '^--$' | sort -u | sed 's/^/  skipped: /'

    ((r == 0)) || { grep -E -B5 '^\[  FAILED  \]' "$logs/$t.log" | head -n 40; rc=1; }
    if ((dry == 0)) && grep -q 'SKIPPED' "$logs/$t.log"; then echo "$t skipped a test on the GPU machine"; rc=1; fi
  done
  if grep -q '^HEFT_WITH_PYTHON:BOOL=ON' "$build/CMakeCache.txt"; then
    local p
    for p in cuda_backend_test; do  # label cuda: exit 77 where torch sees no GPU
      HEFT_BINARY_DIR=$root/$build "$py" -u "tests/python/$p.py" > "$logs/$p.log" 2>&1
      local r=$?
      echo "$p: rc=$r ($( ((r == 77)) && echo skipped || echo ran)) $(grep -E '^(skipped|cuda_backend_worker|OK|FAILED)' "$logs/$p.log" | tr '\n' ' ')"
      if ((r == 77 && dry == 0)) || ((r != 0 && r != 77)); then tail -n 30 "$logs/$p.log"; rc=1; fi
    done
  fi
  return $rc
}
step tests tests
if ((dry)); then
  result "dry_run" "stopped before the GPU measurements ($gpus GPUs seen by torch)"
  echo "h200.sh --dry-run: the rest needs a GPU: heft-train GPT on cuda (tokens/s, MFU), torch's"
  echo "  single-GPU step of the same GPT, 2 ranks sharing the GPU on heft and Gloo, ShardedDataParallel on cuda"
  finish
fi

# ---- measurements: the GPU ---------------------------------------------------------------
export HEFT_HOME=/tmp/heft-home
mkdir -p "$HEFT_HOME"
data=$root/.device/fortunes
# The GPT measured: GPT-2 small's shape on the byte vocabulary (12 x 768, 12 heads, 1024
# context), 32 sequences a step, bf16 autocast, 30 steps.
gpt=(--model gpt --n_layer 12 --n_head 12 --n_embd 768 --block_size 1024 --batch_size 32
     --lr 0.0006 --warmup_steps 5 --eval false --log_every 10 --max_steps 30 --data "$data")
gpt_heft() {
  "$build/heft-train" "${gpt[@]}" --device cuda --bf16 true > "$logs/gpt_heft.log" 2>&1 || { tail -n 20 "$logs/gpt_heft.log"; return 1; }
  grep -E '^(step=|final:)' "$logs/gpt_heft.log" | tail -n 4
  local tps
  tps=$(sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p' "$logs/gpt_heft.log")
  result "gpt_heft_tokens_per_s" "$tps"
  # Model FLOPs per token: 6 x parameters (weights of the blocks and the head) + attention's
  # 12 x layers x width x context; against the H200's dense bf16 peak (989 TFLOP/s by the
  # datasheet; about 790 measured on random 8192^3 products here).
  "$py" - "$tps" <<'PY' | tee -a "$results"
import sys
tps = float(sys.argv[1]); L, d, T, V = 12, 768, 1024, 256
n = L * 12 * d * d + V * d
flops = tps * (6 * n + 12 * L * d * T)
print(f"gpt_heft_model_tflops: {flops / 1e12:.1f}")
print(f"gpt_heft_mfu_vs_989: {flops / 989e12:.3f}")
print(f"gpt_heft_mfu_vs_790_measured: {flops / 790e12:.3f}")
PY
}
step gpt_heft gpt_heft
gpt_torch() {
  "$py" bench/device/gpt_torch_cuda.py --peer .device/peers/gpt_torch.py --data "$data" \
    --n_layer 12 --n_head 12 --n_embd 768 --block_size 1024 --batch 32 --steps 30 \
    > "$logs/gpt_torch.log" 2>&1 || { tail -n 20 "$logs/gpt_torch.log"; return 1; }
  tail -n 2 "$logs/gpt_torch.log"
  result "gpt_torch_tokens_per_s" "$(sed -n 's/.*final: .*tokens_per_s=\([0-9.]*\).*/\1/p' "$logs/gpt_torch.log")"
}
step gpt_torch gpt_torch
if grep -q '^HEFT_WITH_PYTHON:BOOL=ON' "$build/CMakeCache.txt"; then
  export PYTHONPATH=$root/$build/python:$PYTHONPATH
  shared_gpu() {  # 2 ranks on the one GPU: Gloo, then heft (bit for bit, and allreduce time)
    local b
    for b in gloo heft; do
      "$build/heft" run -n 2 -- "$py" bench/device/shared_gpu.py --backend $b --out "$logs/shared_$b.json" \
        > "$logs/shared_$b.log" 2>&1 || { tail -n 20 "$logs/shared_$b.log"; return 1; }
      tail -n 8 "$logs/shared_$b.log"
    done
    "$py" bench/device/shared_gpu.py compare "$logs/shared_gloo.json" "$logs/shared_heft.json" | tee -a "$results"
  }
  step shared_gpu shared_gpu
  sharded_cuda() {
    "$build/heft" run -n 1 -- "$py" bench/device/sharded_cuda.py > "$logs/sharded_cuda.log" 2>&1 \
      || { tail -n 20 "$logs/sharded_cuda.log"; return 1; }
    tail -n 4 "$logs/sharded_cuda.log" | tee -a "$results"
  }
  step sharded_cuda sharded_cuda
fi
finish
