#!/usr/bin/env bash
# OpenMPI's rsh agent for network-namespace test hosts (netns_hosts.sh): mpirun runs
# `netns_rsh.sh HOST COMMAND...` to start its daemon on HOST; this enters HOST's namespaces
# (network and hostname) and runs the command there with /bin/sh, as ssh would on a real host.
# HOST is an address 10.<net>.0.(10+N) or a name hN. NETNS_PREFIX (default heft) names the
# namespaces. Used as: mpirun --mca plm_rsh_agent tests/support/netns_rsh.sh ...
set -euo pipefail
PREFIX=${NETNS_PREFIX:-heft}
while [[ $# -gt 0 && $1 == -* ]]; do shift; done  # ssh-style options, if any
host=${1:?usage: netns_rsh.sh HOST COMMAND...}
shift
if [[ $host =~ ^[0-9]+\.[0-9]+\.[0-9]+\.([0-9]+)$ ]]; then
  host=h$((BASH_REMATCH[1] - 10))
fi
[[ -e /run/netns/$PREFIX-$host ]] || { echo "netns_rsh.sh: no test host $host" >&2; exit 255; }
exec nsenter --net="/run/netns/$PREFIX-$host" --uts="/run/$PREFIX-uts/$host" -- /bin/sh -c "$*"
