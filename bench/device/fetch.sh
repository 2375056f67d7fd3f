#!/usr/bin/env bash
# Gathers into .device/ (ignored by git; the device tool carries it: `carry: [".device"]`)
# what bench/device/h200.sh needs on the GPU machine, which reaches no registry:
#   .device/debs/     heft's Debian build dependencies as .deb files (unpacked there into a
#                     prefix with dpkg -x, never over /): about 11 MB
#   .device/whl/      pybind11 3.0.1 (the one torch 2.11's headers are) for Python 3.12
#   .device/fortunes/ the GPT's text (Debian's fortunes, without the .dat indexes)
#   .device/peers/    ../shared/peers/gpt_torch.py (the same GPT in plain PyTorch)
# Run here, once per session that is lent a GPU (needs apt's package lists and PyPI).
# usage: bench/device/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=.device

# The -dev packages setup.sh installs for the build, their runtime libraries, and pkgconf
# (CMake finds RE2 and cpp-httplib through pkg-config). The GPU machine's image (Ubuntu,
# glibc 2.39) has libc, libstdc++, zlib's runtime and its compiler; not these.
DEBS=(libssl-dev libssl3 libsqlite3-dev libsqlite3-0 libyaml-cpp-dev libyaml-cpp0.7
      nlohmann-json3-dev libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
      zlib1g-dev libeigen3-dev libre2-dev libre2-9 libgtest-dev libgmock-dev
      libbenchmark-dev libbenchmark1debian libcpp-httplib-dev libcpp-httplib0.11
      libbrotli-dev libbrotli1 pkgconf pkgconf-bin libpkgconf3)

rm -rf "$dest/debs" "$dest/whl" "$dest/fortunes" "$dest/peers"
mkdir -p "$dest/debs" "$dest/whl" "$dest/fortunes" "$dest/peers"
(cd "$dest/debs" && apt-get download -qq "${DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
n=$(ls "$dest/debs"/*.deb | wc -l)
[[ $n -eq ${#DEBS[@]} ]] || { echo "fetch.sh: got $n of ${#DEBS[@]} packages" >&2; exit 1; }

pip=$(cat .venv/.heft-pydeps 2>/dev/null)/bin/pip
[[ -x $pip ]] || { echo "fetch.sh: no pip in the shared Python environment; run ./setup.sh first" >&2; exit 1; }
"$pip" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 -d "$dest/whl" pybind11==3.0.1

src=/usr/share/games/fortunes
[[ -d $src ]] || { echo "fetch.sh: $src missing (Debian package fortunes; ./setup.sh)" >&2; exit 1; }
find "$src" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -exec cp {} "$dest/fortunes/" \;
cp ../shared/peers/gpt_torch.py "$dest/peers/"

echo "fetch.sh: $(du -sh "$dest" | cut -f1) in $dest ($n packages, $(ls "$dest/whl"), $(ls "$dest/fortunes" | wc -l) text files)"
