#!/usr/bin/env bash
# heft set-up: installs the Debian packages heft needs, the Python environment .venv/ (torch
# from PyPI, pinned in requirements.txt), then configures and builds against the wheel's LibTorch.
# Idempotent: packages already present are skipped and the build is incremental.
#   ./setup.sh                  install + configure + build (Release)
#   HEFT_SKIP_APT=1 ./setup.sh  skip the package step (no root needed)
#   HEFT_BUILD_TYPE=Debug HEFT_SANITIZE=address ./setup.sh   other build flavours
#   HEFT_PYDEPS=DIR ./setup.sh  where the shared Python packages live (default below)
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries (DESIGN.md, "Dependencies")
  libssl-dev libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev zlib1g-dev libeigen3-dev libre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev python3-dev
  # Debian's python3 and its venv module: .venv/ (torch, torchvision, ... from PyPI)
  python3 python3-venv
  # peers: OpenMPI (and its mpirun launcher)
  openmpi-bin libopenmpi-dev
  # real data for the built-in trainer
  dataset-fashion-mnist fortunes
  # observability: the web console (server, plots) and its browser test
  libcpp-httplib-dev libjs-chart.js chromium chromium-driver
  # clusters: network-namespace test hosts, a Slurm test cluster
  iproute2 slurm-wlm munge
)

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
  done
}

if [[ "${HEFT_SKIP_APT:-0}" != 1 ]]; then
  mapfile -t missing < <(missing_packages)
  if ((${#missing[@]})); then
    echo "setup.sh: installing ${#missing[@]} Debian packages: ${missing[*]}"
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then
      command -v sudo >/dev/null || { echo "setup.sh: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
      SUDO=sudo
    fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "setup.sh: all ${#PACKAGES[@]} Debian packages present"
  fi
fi

# ---- Python: requirements.txt into one shared environment per pinned set and Python --------
# The packages (about 3 GB downloaded, 4.9 GB installed: torch's CUDA build and its nvidia-*
# libraries) go once per machine into $HEFT_PYDEPS, keyed by requirements.txt's hash, so a
# second clone (CI's) fetches nothing. .venv/ here is a small venv of Debian's python3 that
# adds those packages and this clone's build/python (the heft package) to its path.
PY=/usr/bin/python3
PYVER=$($PY -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
key=$( (cat requirements.txt; echo "$PYVER") | sha256sum | cut -c1-12)
PYDEPS=${HEFT_PYDEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/heft/pydeps-$key}
if [[ ! -f "$PYDEPS/.complete" ]]; then
  echo "setup.sh: installing requirements.txt into $PYDEPS (about 3 GB to download)"
  rm -rf "$PYDEPS"
  mkdir -p "$(dirname "$PYDEPS")"
  $PY -m venv "$PYDEPS"
  "$PYDEPS/bin/pip" install -q -r requirements.txt
  touch "$PYDEPS/.complete"
fi
site=lib/python$PYVER/site-packages
if [[ ! -x .venv/bin/python || "$(cat .venv/.heft-pydeps 2>/dev/null)" != "$PYDEPS" ]]; then
  rm -rf .venv
  $PY -m venv --without-pip .venv
  # The shared packages as a site directory (their own .pth files are read too).
  echo "import site; site.addsitedir('$PYDEPS/$site')" > ".venv/$site/00-heft-pydeps.pth"
  # Their commands (torchrun, ...), started by this venv's python.
  for f in "$PYDEPS"/bin/*; do
    name=$(basename "$f")
    [[ -e ".venv/bin/$name" ]] && continue
    if head -c 200 "$f" | head -1 | grep -q "^#!$PYDEPS/bin/python"; then
      { echo "#!$PWD/.venv/bin/python"; tail -n +2 "$f"; } > ".venv/bin/$name"
      chmod +x ".venv/bin/$name"
    fi
  done
  echo "$PYDEPS" > .venv/.heft-pydeps
fi
# heft's Python package, importable from any directory: build/python (the extension and the
# package's files are built there).
BUILD_DIR=${HEFT_BUILD_DIR:-build}
echo "$PWD/$BUILD_DIR/python" > ".venv/$site/heft.pth"
echo "setup.sh: Python $PYVER in .venv/ with torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE="${HEFT_BUILD_TYPE:-Release}"
            -DPython_EXECUTABLE="$PWD/.venv/bin/python"
            -DCMAKE_PREFIX_PATH="$(.venv/bin/python -c 'import torch, pybind11; print(torch.utils.cmake_prefix_path + ";" + pybind11.get_cmake_dir())')")
[[ -n "${HEFT_SANITIZE:-}" ]] && cmake_args+=(-DHEFT_SANITIZE="$HEFT_SANITIZE")
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup.sh: built into $BUILD_DIR/ (try: $BUILD_DIR/heft --help)"
