#!/usr/bin/env bash
# heft set-up: installs the Debian packages heft needs, then configures and builds.
# Idempotent: packages already present are skipped and the build is incremental.
#   ./setup.sh                  install + configure + build (Release)
#   HEFT_SKIP_APT=1 ./setup.sh  skip the package step (no root needed)
#   HEFT_BUILD_TYPE=Debug HEFT_SANITIZE=address ./setup.sh   other build flavours
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # libraries (DESIGN.md, "Dependencies")
  libssl-dev libsqlite3-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libspdlog-dev libfmt-dev zlib1g-dev libeigen3-dev libre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev pybind11-dev python3-dev
  libtorch-dev libopenblas0-pthread
  # peers and compatibility tests: OpenMPI, PyTorch (Gloo) on Debian's python3
  openmpi-bin libopenmpi-dev python3 python3-numpy python3-torch python3-mpi4py python3-optuna
  python3-torchvision
  # real data for the built-in trainer
  dataset-fashion-mnist fortunes
  # observability: the web console (server, plots) and its browser test
  libcpp-httplib-dev libjs-chart.js chromium chromium-driver python3-selenium
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

BUILD_DIR=${HEFT_BUILD_DIR:-build}
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE="${HEFT_BUILD_TYPE:-Release}")
[[ -n "${HEFT_SANITIZE:-}" ]] && cmake_args+=(-DHEFT_SANITIZE="$HEFT_SANITIZE")
cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}"
cmake --build "$BUILD_DIR" -j "$(nproc)"
echo "setup.sh: built into $BUILD_DIR/ (try: $BUILD_DIR/heft --help)"
