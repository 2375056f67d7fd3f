#!/usr/bin/env python3
"""Fault campaign: randomized trials that SIGKILL or SIGSTOP one random rank of a running
group at a random moment, and check that heft ends the group, leaves nothing behind and
names the right rank.

Each trial picks a workload (heft-train's DDP CNN; a PyTorch Gloo allreduce loop), a layout
(`-n 4`; `--hosts 2 -n 2`) and a fault (SIGKILL: a crash; SIGSTOP: a hang), starts
`heft run --timeout T --grace G`, waits until every worker runs, waits a random 0.5-3 s,
signals one random worker and times how long `heft run` takes to exit.
  hang:    heft run still running 30 s after the fault was due to end (T + G for a SIGSTOP)
  orphan:  a worker (or a worker's child) still running after heft run exited
  named:   heft run's summary names the signalled rank ("rank R was killed by signal 9",
           "rank R stopped responding in ..."); Gloo does not say whom it waited for, so a
           hung Gloo rank is not expected to be named
Prints one line per trial and a summary: trials, hangs, orphans, median and max seconds from
the fault to heft's exit (for SIGSTOP, past the timeout), and how many trials named the rank.

usage: bench/fault_campaign.sh [--trials 100] [--seed 1] [--timeout 5] [--grace 2]
                               [--workloads heft-train,gloo] [--build build]
Exit status: 0 when there was no hang and no orphan, 1 otherwise.
"""
import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import time

GLOO_LOOP = r"""
import datetime, os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=int(os.environ["HEFT_TIMEOUT"])))
x = torch.ones(1 << 16)
while True:
    dist.all_reduce(x)
"""


def children(pid):
    """Every descendant of pid (from /proc), as {pid: environ text}."""
    parent_of = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
            parent_of[int(name)] = int(stat[stat.rfind(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    out, frontier = set(), {pid}
    while frontier:
        nxt = {c for c, p in parent_of.items() if p in frontier and c not in out}
        out |= nxt
        frontier = nxt
    return out


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for item in f.read().split(b"\0"):
                if item.startswith(b"RANK="):
                    return int(item[5:])
    except OSError:
        pass
    return None


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rfind(")") + 2] != "Z"
    except OSError:
        return False


def trial(args, rng, index):
    workload = rng.choice(args.workloads)
    layout = rng.choice([["-n", "4"], ["--hosts", "2", "-n", "2"]])
    fault = rng.choice([signal.SIGKILL, signal.SIGSTOP])
    heft = os.path.join(args.build, "heft")
    if workload == "heft-train":
        cmd = [os.path.join(args.build, "heft-train"), "--model", "cnn", "--epochs", "50",
               "--limit", "2048", "--log_every", "1000000", "--eval", "false"]
    else:
        cmd = [sys.executable, "-u", "-c", GLOO_LOOP]
    argv = [heft, "run", *layout, "--timeout", str(args.timeout), "--grace", str(args.grace),
            "--", *cmd]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    workers, deadline = {}, time.time() + 60
    while time.time() < deadline and len(workers) < 4:
        workers = {}
        for c in children(proc.pid):
            r = rank_of(c)
            if r is not None and r not in workers:
                workers[r] = c
        time.sleep(0.05)
    seen = children(proc.pid)
    time.sleep(rng.uniform(0.5, 3.0))
    rank = rng.randrange(4)
    target = workers.get(rank)
    if target is not None:
        try:
            os.kill(target, fault)
        except ProcessLookupError:
            pass
    faulted = time.time()
    limit = 30 + (args.timeout + args.grace if fault == signal.SIGSTOP else args.grace)
    hang = False
    try:
        proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        hang = True
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    took = time.time() - faulted
    err = proc.stderr.read().decode(errors="replace")
    time.sleep(0.3)
    orphans = [p for p in seen | children(proc.pid) if alive(p)]
    for p in orphans:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if target is not None and fault == signal.SIGSTOP:
        try:
            os.kill(target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if fault == signal.SIGKILL:
        named = f"rank {rank} was killed by signal 9" in err
    else:
        named = f"rank {rank} stopped responding" in err
    expect_named = not (workload == "gloo" and fault == signal.SIGSTOP)
    line = (f"trial={index} workload={workload} layout={'x'.join(layout[1::2])} "
            f"fault={signal.Signals(fault).name} rank={rank} exit={proc.returncode} "
            f"seconds={took:.2f} hang={int(hang)} orphans={len(orphans)} "
            f"named={int(named)}{'' if expect_named else '(not expected)'}"
            f"{'' if target is not None else ' NOT-STARTED'}")
    print(line, flush=True)
    return dict(hang=hang, orphans=len(orphans), took=took, named=named,
                expect_named=expect_named, fault=fault, started=target is not None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=5, help="heft run --timeout (seconds)")
    ap.add_argument("--grace", type=float, default=2)
    ap.add_argument("--workloads", default="heft-train,gloo")
    ap.add_argument("--build", default="build")
    args = ap.parse_args()
    args.workloads = args.workloads.split(",")
    rng = random.Random(args.seed)
    results = [trial(args, rng, i + 1) for i in range(args.trials)]
    kill = [r["took"] for r in results if r["fault"] == signal.SIGKILL]
    stop = [r["took"] for r in results if r["fault"] == signal.SIGSTOP]
    expected = [r for r in results if r["expect_named"]]

    def stats(xs):
        return f"median={statistics.median(xs):.2f} max={max(xs):.2f}" if xs else "none"

    hangs = sum(r["hang"] for r in results)
    orphans = sum(r["orphans"] for r in results)
    print(f"summary: trials={len(results)} hangs={hangs} orphans={orphans} "
          f"not_started={sum(not r['started'] for r in results)} "
          f"sigkill_seconds: {stats(kill)} sigstop_seconds: {stats(stop)} "
          f"(timeout {args.timeout} s, grace {args.grace} s) "
          f"named={sum(r['named'] for r in expected)}/{len(expected)}")
    return 0 if hangs == 0 and orphans == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
