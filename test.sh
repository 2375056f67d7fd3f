#!/usr/bin/env bash
# heft's test command: builds if needed (running ./setup.sh when there is no build yet),
# then runs every ctest test that fits CI's time (labels unit, multiproc and cuda, the last
# skipping where no GPU answers; `slow` too when HEFT_TEST_SLOW=1). Extra arguments go to
# ctest, e.g. ./test.sh -L unit -R store.
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=${HEFT_BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  ./setup.sh
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
labels='unit|multiproc|cuda'
[[ "${HEFT_TEST_SLOW:-0}" == 1 ]] && labels='unit|multiproc|cuda|slow'
exec ctest --test-dir "$BUILD_DIR" -L "$labels" --output-on-failure --timeout 600 "$@"
