#!/usr/bin/env bash
# Randomized fault campaign against heft run: SIGKILL / SIGSTOP of a random rank at a random
# moment; prints trials, hangs, orphans, time to exit and whether the right rank was named.
# See bench/fault_campaign.py for the options (--trials 100 --seed 1 --timeout 5 ...).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x build/heft ]] || { echo "$0: build/heft missing: run ./setup.sh first" >&2; exit 1; }
exec .venv/bin/python bench/fault_campaign.py "$@"
