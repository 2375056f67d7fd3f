#!/usr/bin/env bash
# Test hosts as Linux network namespaces: N "hosts", each with its own network stack
# (namespace <prefix>-hN), hostname (a UTS namespace kept in /run/<prefix>-uts/hN) and address
# 10.<net>.0.(10+N) on eth0, joined by veth pairs to a bridge <prefix>-br (10.<net>.0.1, the
# launching host's side); every host link shaped with tc (tbf; default 1gbit, both directions;
# a delay needs the kernel's netem qdisc and is skipped with a message where it is missing).
# Needs root and iproute2 (setup.sh installs it). Idempotent: `up` tears down what a previous
# run left; `down` removes everything, whatever exists.
#
#   netns_hosts.sh up N [--rate 1gbit] [--delay 0.2ms] [--prefix heft] [--net 77]
#   netns_hosts.sh down [--prefix heft]
#   netns_hosts.sh exec HOST CMD...      run CMD on host HOST (h1, h2, ...) [--prefix first]
#   netns_hosts.sh addr HOST             its address (h0 is the bridge: the launching host)
#   netns_hosts.sh check                 exit 0 when namespaces can be made here, else 1 + why
# docs/clusters.md shows them in use.
set -euo pipefail

PREFIX=heft NET=77 RATE=1gbit DELAY=0.2ms
cmd=${1:-}; shift || true
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --prefix) PREFIX=$2; shift 2 ;;
    --net) NET=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --delay) DELAY=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
UTS=/run/$PREFIX-uts
BR=$PREFIX-br

die() { echo "netns_hosts.sh: $*" >&2; exit 1; }

check() {
  [[ $(id -u) -eq 0 ]] || { echo "netns_hosts.sh: needs root (network namespaces)"; return 1; }
  command -v ip >/dev/null && command -v tc >/dev/null && command -v nsenter >/dev/null ||
    { echo "netns_hosts.sh: needs iproute2 (ip, tc) and util-linux (nsenter)"; return 1; }
  local probe=$PREFIX-probe$$
  if ! ip netns add "$probe" 2>/dev/null; then
    echo "netns_hosts.sh: cannot create a network namespace here (ip netns add failed)"; return 1
  fi
  ip netns del "$probe"
}

down() {
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-h[0-9]*$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$PREFIX-v[0-9]*$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  if [[ -d $UTS ]]; then
    for f in "$UTS"/*; do
      [[ -e $f ]] || continue
      umount "$f" 2>/dev/null || true
      rm -f "$f"
    done
    rmdir "$UTS" 2>/dev/null || true
  fi
}

shape() {  # shape DEV [NETNS]
  local run=()
  [[ -n ${2:-} ]] && run=(ip netns exec "$2")
  "${run[@]}" tc qdisc replace dev "$1" root tbf rate "$RATE" burst 256kb latency 50ms
}

up() {
  local n=${args[0]:-}
  [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 200 ]] || die "up: expected a number of hosts 1..200, found '${n}'"
  check >/dev/null || die "$(check)"
  down
  ip link add "$BR" type bridge
  ip addr add "10.$NET.0.1/24" dev "$BR"
  ip link set "$BR" up
  mkdir -p "$UTS"
  local delay_ok=1
  for i in $(seq "$n"); do
    local ns=$PREFIX-h$i veth=$PREFIX-v$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$BR" up
    ip -n "$ns" addr add "10.$NET.0.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    touch "$UTS/h$i"
    unshare --uts="$UTS/h$i" hostname "h$i"
    shape "$veth"
    shape eth0 "$ns"
    if [[ $DELAY != 0 && $DELAY != 0ms ]] && ! ip netns exec "$ns" tc qdisc add dev lo root netem delay 0ms 2>/dev/null; then
      delay_ok=0
    fi
    ip netns exec "$ns" tc qdisc del dev lo root 2>/dev/null || true
  done
  (( delay_ok )) || echo "netns_hosts.sh: no netem qdisc in this kernel: links shaped to $RATE without the $DELAY delay" >&2
  echo "netns_hosts.sh: $n hosts h1..h$n at 10.$NET.0.11-$((10 + n)), launching host 10.$NET.0.1 on $BR, links $RATE"
}

case "$cmd" in
  up) up ;;
  down) down ;;
  check) check ;;
  addr)
    h=${args[0]:-}
    [[ $h =~ ^h([0-9]+)$ ]] || die "addr: expected h0, h1, ..., found '$h'"
    i=${BASH_REMATCH[1]}
    if (( i == 0 )); then echo "10.$NET.0.1"; else echo "10.$NET.0.$((10 + i))"; fi ;;
  exec)
    h=${args[0]:-}
    [[ $h =~ ^h[0-9]+$ && -e /run/netns/$PREFIX-$h ]] || die "exec: no host '$h' (netns_hosts.sh up N first)"
    exec nsenter --net="/run/netns/$PREFIX-$h" --uts="$UTS/$h" -- "${args[@]:1}" ;;
  *) die "usage: netns_hosts.sh up N [--rate R] [--delay D] | down | exec HOST CMD... | addr HOST | check" ;;
esac
