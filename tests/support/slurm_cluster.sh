#!/usr/bin/env bash
# A one-machine Slurm cluster for tests: munged, slurmctld and slurmd (Debian's slurm-wlm and
# munge) with every file in a private folder, as root; NODES slurmd daemons on this machine
# (node names n1..nN, ports of their own, 2 CPUs each). Prints `export SLURM_CONF=...` to
# evaluate. With --netns, each slurmd runs in a namespace host of its own
# (tests/support/netns_hosts.sh, prefix hslurm, 10.76.0.1N, 1 Gbit/s links) and its tasks
# with it; the controller listens on the bridge (10.76.0.1). Facts it relies on:
# ../shared/notes/clusters-on-this-machine.md.
#
#   eval "$(tests/support/slurm_cluster.sh up DIR [NODES] [--netns])"   # starts; nodes idle
#   tests/support/slurm_cluster.sh down DIR                  # stops every daemon, removes DIR
#   tests/support/slurm_cluster.sh check                     # exit 0 when it can run here
set -euo pipefail
cmd=${1:-}
dir=${2:-}

check() {
  [[ $(id -u) -eq 0 ]] || { echo "slurm_cluster.sh: needs root"; return 1; }
  for b in slurmctld slurmd srun munged mungekey sinfo; do
    command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] ||
      { echo "slurm_cluster.sh: $b is missing (setup.sh installs slurm-wlm and munge)"; return 1; }
  done
}

down() {
  [[ -n $dir ]] || { echo "usage: slurm_cluster.sh down DIR" >&2; exit 2; }
  for pidfile in "$dir"/*.pid; do
    [[ -e $pidfile ]] || continue
    kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 0.3
  for pidfile in "$dir"/*.pid; do
    [[ -e $pidfile ]] || continue
    kill -9 "$(cat "$pidfile")" 2>/dev/null || true
  done
  if [[ -e $dir/netns ]]; then
    "$(dirname "$0")/netns_hosts.sh" down --prefix "$(cat "$dir/netns")" >/dev/null 2>&1 || true
  fi
  rm -rf "$dir"
}

up() {
  [[ -n $dir ]] || { echo "usage: slurm_cluster.sh up DIR [NODES]" >&2; exit 2; }
  local nodes=1 netns=""
  for a in "${@:3}"; do
    case "$a" in
      --netns) netns=hslurm ;;
      *) nodes=$a ;;
    esac
  done
  check >&2 || exit 1
  local hosts_sh
  hosts_sh="$(dirname "$0")/netns_hosts.sh"
  if [[ -n $netns ]]; then
    "$hosts_sh" check >&2 || exit 1
    "$hosts_sh" up "$nodes" --prefix "$netns" --net 76 >&2 || exit 1
  fi
  mkdir -p "$dir/munge" "$dir/spool" "$dir/state"
  [[ -z $netns ]] || echo "$netns" > "$dir/netns"
  chmod 755 "$dir" "$dir/munge"
  mungekey --create --keyfile="$dir/munge.key" >/dev/null 2>&1
  munged --key-file="$dir/munge.key" --socket="$dir/munge/sock" --pid-file="$dir/munged.pid" \
    --log-file="$dir/munged.log" --seed-file="$dir/munge.seed"
  local host ctl_port
  host=$(hostname)
  ctl_port=$((20000 + RANDOM % 20000))
  {
    echo "ClusterName=heft"
    if [[ -n $netns ]]; then echo "SlurmctldHost=$host(10.76.0.1)"; else echo "SlurmctldHost=$host"; fi
    echo "SlurmctldPort=$ctl_port"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$dir/munge/sock"
    echo "StateSaveLocation=$dir/state"
    echo "SlurmdSpoolDir=$dir/spool/%n"
    echo "SlurmctldPidFile=$dir/slurmctld.pid"
    echo "SlurmdPidFile=$dir/slurmd-%n.pid"
    echo "SlurmctldLogFile=$dir/slurmctld.log"
    echo "SlurmdLogFile=$dir/slurmd-%n.log"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "MpiDefault=none"
    echo "ReturnToService=2"
    for i in $(seq "$nodes"); do
      local addr=127.0.0.1
      [[ -z $netns ]] || addr=10.76.0.$((10 + i))
      echo "NodeName=n$i NodeHostname=$host NodeAddr=$addr Port=$((ctl_port + i)) CPUs=2 State=UNKNOWN"
    done
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } > "$dir/slurm.conf"
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D > "$dir/slurmctld.out" 2>&1 &
  echo $! > "$dir/slurmctld.pid"
  for i in $(seq "$nodes"); do
    mkdir -p "$dir/spool/n$i"
    if [[ -n $netns ]]; then  # nsenter, not ip netns exec: slurmd wants /sys/fs/cgroup
      nsenter --net="/run/netns/$netns-h$i" slurmd -D -N "n$i" > "$dir/slurmd-n$i.out" 2>&1 &
    else
      slurmd -D -N "n$i" > "$dir/slurmd-n$i.out" 2>&1 &
    fi
    echo $! > "$dir/slurmd-n$i.pid"
  done
  for _ in $(seq 100); do
    if [[ $(timeout 2 sinfo -h -o %t 2>/dev/null | sort -u) == idle ]]; then
      echo "export SLURM_CONF=$dir/slurm.conf"
      return 0
    fi
    sleep 0.2
  done
  echo "slurm_cluster.sh: the nodes did not become idle; logs in $dir" >&2
  timeout 2 sinfo >&2 || true
  exit 1
}

case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  check) check ;;
  *) echo "usage: slurm_cluster.sh up DIR [NODES] [--netns] | down DIR | check" >&2; exit 2 ;;
esac
