"""What losing one rank costs (issue "Lose no step"): `heft train` of heft-train's GPT on
2 simulated hosts x 2 workers, DDP, sharded (ZeRO-3 over the 4) or hybrid (shard 2 x replicate
2), checkpoints every --every steps, one retry; in each trial a random rank (1-3) is SIGKILLed
after a random completed step (uniform in --kill-from..--kill-to). Without --in-place the job
restarts from its last checkpoint on disk; with it (retry.in_place, docs/recovery.md) the lost
rank alone is restarted and takes its state from the others' memory; --buddy-too kills the
rank's buddy as well (rank + 2), so that the job falls back to the disk. Per trial: the time
from the kill to the next completed step, the steps computed again (the last step printed
before the first step after the kill, down to that step), the job's starts and in-place
restarts, the job's time against an undisturbed run of the same spec in the same invocation,
whether its final loss equals the undisturbed run's, and whether any worker of the job
outlived it (an orphan).

Steps are read from the job's own output as it arrives (log_every 1: rank 0 prints each step);
the kill goes to the worker whose environment has the job's HEFT_JOB and the chosen RANK.

    .venv/bin/python bench/recovery_campaign.py [--trials 5] [--strategies ddp,sharded]
        [--steps 300] [--every 100] [--kill-from 120] [--kill-to 280] [--seed 1]
        [--in-place] [--buddy-too] [--plain-once] [--overhead N]
With --overhead N: no kills; N pairs of undisturbed runs per strategy, retry.in_place off and on
in turn, and the median step time of each (heft-train's step_time line): what keeping the
buddies' copies costs a step.
Prints the machine (CPU, memcpy GB/s), every trial, then per strategy the median and worst.
"""
import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEFT = os.path.join(ROOT, "build", "heft")
STEP = re.compile(r"^\[rank 0\] step=(\d+) .*loss=(\S+)")
RECOVERED = re.compile(r"^\[rank 0\] recovered: generation=\d+ step=(\d+)")
STEP_TIME = re.compile(r"^\[rank 0\] step_time: median_s=(\S+) worst_s=(\S+)")
BUDDIES = re.compile(r"^\[rank 0\] buddies: copies=\d+ part_bytes=(\d+) copy_ms median=(\S+) worst=(\S+) "
                     r"cpu_median=(\S+) wait_ms median=(\S+) worst=(\S+)")
STARTS = re.compile(r"Completed after .* (\d+) starts?,")
FINAL = re.compile(r"^\[rank 0\] final: step=(\d+) loss=(\S+)")


def spec(folder, name, strategy, steps, every, in_place=False):
    degree = {"sharded": 4, "hybrid": 2}.get(strategy)
    parallel = ("distribution:\n  modelparallel:\n    enabled: true\n    parameters:\n"
                f"      sharded_data_parallel_degree: {degree}\n      placement_strategy: cluster\n"
                if degree else "")
    path = os.path.join(folder, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"name: {name}\nentry_point: heft-train\n"
                f"hyperparameters: {{model: gpt, max_steps: {steps}, batch_size: 16, lr: 0.002,\n"
                f"  warmup_steps: 50, log_every: 1, eval_every: 100000, generate: 0, seed: 1}}\n"
                "inputs: {train: /usr/share/games/fortunes}\n"
                "cluster: {instance_count: 2, processes_per_host: 2, launcher: local}\n"
                f"{parallel}checkpoint: {{every_steps: {every}, keep: 2}}\n"
                f"retry: {{max_attempts: 2, in_place: {'true' if in_place else 'false'}}}\n"
                "stopping: {max_runtime_s: 1800, grace_s: 5}\n")
    return path


def rank_pid(job, rank):
    """The pid of the worker of `job` whose RANK is `rank`, or None."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if f"HEFT_JOB={job}".encode() in env and f"RANK={rank}".encode() in env:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"heft-train" in f.read():
                    return int(pid)
    return None


def run(home, path, job, kill_after=None, kill_ranks=()):
    """Runs the job; returns dict(seconds, final, kill_to_next_step, redone, starts, in_place,
    orphans)."""
    env = dict(os.environ, HEFT_HOME=home)
    start = time.monotonic()
    p = subprocess.Popen([HEFT, "train", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, cwd=ROOT)
    out = {"kill_to_next_step": None, "redone": None, "final": None, "starts": None, "in_place": 0}
    killed_at = None
    newest = 0       # the newest step printed
    reformed = False  # a recovered: line came (in place); the next step line is the next step
    for line in p.stdout:
        if "restarted it alone" in line:
            out["in_place"] += 1
        if RECOVERED.match(line):
            reformed = True
        s = STARTS.search(line)
        if s:
            out["starts"] = int(s[1])
        m = STEP.match(line)
        if m:
            step = int(m[1])
            if killed_at is None and kill_after is not None and step >= kill_after:
                pids = [rank_pid(job, r) for r in kill_ranks]
                for pid in pids:
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                if any(pids):
                    killed_at = time.monotonic()
            elif killed_at is not None and out["kill_to_next_step"] is None and (reformed or step <= newest):
                # The first step completed after the loss: in the re-formed world, or by the
                # restarted group (which resumed at the checkpoint).
                out["kill_to_next_step"] = time.monotonic() - killed_at
                out["redone"] = newest - step + 1
            newest = max(newest, step)
        f = FINAL.match(line)
        if f:
            out["final"] = f[2]
        t = STEP_TIME.match(line)
        if t:
            out["step_s"] = float(t[1])
        b = BUDDIES.match(line)
        if b:
            out["buddies"] = (int(b[1]),) + tuple(float(x) for x in b.groups()[1:])
    p.wait()
    out["orphans"] = sum(1 for r in range(4) if rank_pid(job, r))
    out["seconds"] = time.monotonic() - start
    out["code"] = p.returncode
    return out


def overhead(a):
    print("# strategy pair step_s_off step_s_on on/off  (on: rank 0's part bytes, the training thread's copy ms "
          "median/worst (its CPU ms median) and wait ms median/worst a boundary)", flush=True)
    with tempfile.TemporaryDirectory(prefix="heft-recovery-") as tmp:
        for strategy in a.strategies.split(","):
            ratios = []
            for t in range(a.overhead):
                step = {}
                for on in (False, True):
                    name = f"{'on' if on else 'off'}-{strategy}-{t}"
                    r = run(os.path.join(tmp, name), spec(tmp, name, strategy, a.steps, a.every, on), name)
                    step[on] = r.get("step_s", float("nan"))
                    if on:
                        b = r.get("buddies")
                        buddies = (f"  part {b[0]} B, copy {b[1]:.2f}/{b[2]:.2f} ms (CPU {b[3]:.2f}), "
                                   f"wait {b[4]:.2f}/{b[5]:.2f} ms" if b else "")
                ratios.append(step[True] / step[False])
                print(f"{strategy} {t} {step[False]:.4f} {step[True]:.4f} {ratios[-1]:.3f}{buddies}", flush=True)
            print(f"# {strategy}: step time with in_place / without: median {statistics.median(ratios):.3f}, "
                  f"worst {max(ratios):.3f}", flush=True)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--strategies", default="ddp,sharded")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--kill-from", type=int, default=120)
    ap.add_argument("--kill-to", type=int, default=280)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--in-place", action="store_true", help="retry.in_place: restart the lost rank alone")
    ap.add_argument("--buddy-too", action="store_true", help="kill the rank's buddy (rank + 2) as well")
    ap.add_argument("--overhead", type=int, default=0, help="N pairs of undisturbed runs, in_place off/on")
    ap.add_argument("--plain-once", action="store_true",
                    help="one undisturbed run per strategy, not one per trial")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    memcpy = subprocess.run([os.path.join(ROOT, "build", "memory_bandwidth_bench"),
                             "--benchmark_filter=BM_Memcpy/1048576$", "--benchmark_format=csv"],
                            capture_output=True, text=True).stdout
    gbs = next((float(l.split(",")[5]) / 1e9 for l in memcpy.splitlines() if l.startswith('"BM_Memcpy')), 0)
    print(f"# {cpu}, {os.cpu_count()} cores, memcpy 1 MiB {gbs:.1f} GB/s, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {a.steps} steps, checkpoint every "
          f"{a.every}, kill after a step in {a.kill_from}..{a.kill_to}, "
          f"{'in place' if a.in_place else 'full restart'}{', buddy too' if a.buddy_too else ''}", flush=True)
    print("# strategy trial rank killed_after kill_to_next_step_s redone starts in_place_restarts job_s "
          "undisturbed_s same_final_loss orphans", flush=True)
    if a.overhead:
        return overhead(a)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="heft-recovery-") as tmp:
        for strategy in a.strategies.split(","):
            plain = None
            for t in range(a.trials):
                home = os.path.join(tmp, f"{strategy}-{t}")
                if plain is None or not a.plain_once:
                    plain = run(home, spec(tmp, f"plain-{strategy}-{t}", strategy, a.steps, a.every, a.in_place),
                                f"plain-{strategy}-{t}")
                kill_after, rank = rnd.randint(a.kill_from, a.kill_to), rnd.randint(1, 3)
                ranks = (rank, (rank + 2) % 4) if a.buddy_too else (rank,)
                name = f"kill-{strategy}-{t}"
                hit = run(home, spec(tmp, name, strategy, a.steps, a.every, a.in_place), name, kill_after, ranks)
                same = hit["final"] is not None and hit["final"] == plain["final"]
                print(f"{strategy} {t} {'+'.join(map(str, ranks))} {kill_after} "
                      f"{hit['kill_to_next_step'] or float('nan'):.2f} {hit['redone']} {hit['starts']} "
                      f"{hit['in_place']} {hit['seconds']:.1f} {plain['seconds']:.1f} {same} {hit['orphans']}"
                      f"{'' if hit['code'] == 0 else ' exit ' + str(hit['code'])}", flush=True)
                rows.setdefault(strategy, []).append((hit, plain, same))
    print("\n| strategy | trials | kill to next step s, median (worst) | steps redone, median (worst) "
          "| job / undisturbed, median (worst) | final loss equal | starts > 1 | orphans | failed jobs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for strategy, rs in rows.items():
        ks = [h["kill_to_next_step"] for h, _, _ in rs if h["kill_to_next_step"] is not None]
        rd = [h["redone"] for h, _, _ in rs if h["redone"] is not None]
        ratio = [h["seconds"] / p["seconds"] for h, p, _ in rs]
        print(f"| {strategy} | {len(rs)} | {statistics.median(ks):.1f} ({max(ks):.1f}) | "
              f"{statistics.median(rd):.0f} ({max(rd)}) | {statistics.median(ratio):.2f} "
              f"({max(ratio):.2f}) | {sum(s for _, _, s in rs)} of {len(rs)} | "
              f"{sum(1 for h, _, _ in rs if (h['starts'] or 0) > 1)} | {sum(h['orphans'] for h, _, _ in rs)} | "
              f"{sum(1 for h, _, _ in rs if h['code'] != 0)} |")


if __name__ == "__main__":
    sys.exit(main())
