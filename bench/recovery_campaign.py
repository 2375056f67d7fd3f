"""What losing one rank costs today (issue "Lose no step"): `heft train` of heft-train's GPT on
2 simulated hosts x 2 workers, DDP or sharded (ZeRO-3 over the 4), checkpoints every
--every steps, one retry; in each trial a random rank (1-3) is SIGKILLed after a random
completed step (uniform in --kill-from..--kill-to), and the job restarts from its last checkpoint
on disk. Per trial: the time from the kill to the next completed step, the steps computed again
(the last step completed before the kill, down to the one the restart resumed at), the job's
time against an undisturbed run of the same spec in the same invocation, and whether its final
loss equals the undisturbed run's.

Steps are read from the job's own output as it arrives (log_every 1: rank 0 prints each step);
the kill goes to the worker whose environment has the job's HEFT_JOB and the chosen RANK.

    .venv/bin/python bench/recovery_campaign.py [--trials 5] [--strategies ddp,sharded]
        [--steps 300] [--every 100] [--kill-from 120] [--kill-to 280] [--seed 1]
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
FINAL = re.compile(r"^\[rank 0\] final: step=(\d+) loss=(\S+)")


def spec(folder, name, strategy, steps, every):
    parallel = ("distribution:\n  modelparallel:\n    enabled: true\n    parameters:\n"
                "      sharded_data_parallel_degree: 4\n      placement_strategy: cluster\n"
                if strategy == "sharded" else "")
    path = os.path.join(folder, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"name: {name}\nentry_point: heft-train\n"
                f"hyperparameters: {{model: gpt, max_steps: {steps}, batch_size: 16, lr: 0.002,\n"
                f"  warmup_steps: 50, log_every: 1, eval_every: 100000, generate: 0, seed: 1}}\n"
                "inputs: {train: /usr/share/games/fortunes}\n"
                "cluster: {instance_count: 2, processes_per_host: 2, launcher: local}\n"
                f"{parallel}checkpoint: {{every_steps: {every}, keep: 2}}\n"
                "retry: {max_attempts: 2}\nstopping: {max_runtime_s: 1800, grace_s: 5}\n")
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


def run(home, path, job, kill_after=None, kill_rank=None):
    """Runs the job; returns dict(seconds, final, kill_to_next_step, redone)."""
    env = dict(os.environ, HEFT_HOME=home)
    start = time.monotonic()
    p = subprocess.Popen([HEFT, "train", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env, cwd=ROOT)
    out = {"kill_to_next_step": None, "redone": None, "final": None}
    killed_at = last_before = None
    for line in p.stdout:
        m = STEP.match(line)
        if m:
            step = int(m[1])
            if killed_at is None and kill_after is not None and step >= kill_after:
                pid = rank_pid(job, kill_rank)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    killed_at, last_before = time.monotonic(), step
            elif killed_at is not None and out["kill_to_next_step"] is None and step <= last_before:
                # The first step the restarted group completed (resumed at the checkpoint).
                out["kill_to_next_step"] = time.monotonic() - killed_at
                out["redone"] = last_before - step + 1
        f = FINAL.match(line)
        if f:
            out["final"] = f[2]
    p.wait()
    out["seconds"] = time.monotonic() - start
    out["code"] = p.returncode
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--strategies", default="ddp,sharded")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--kill-from", type=int, default=120)
    ap.add_argument("--kill-to", type=int, default=280)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    memcpy = subprocess.run([os.path.join(ROOT, "build", "memory_bandwidth_bench"),
                             "--benchmark_filter=BM_Memcpy/1048576$", "--benchmark_format=csv"],
                            capture_output=True, text=True).stdout
    gbs = next((float(l.split(",")[5]) / 1e9 for l in memcpy.splitlines() if l.startswith('"BM_Memcpy')), 0)
    print(f"# {cpu}, {os.cpu_count()} cores, memcpy 1 MiB {gbs:.1f} GB/s, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {a.steps} steps, checkpoint every "
          f"{a.every}, kill after a step in {a.kill_from}..{a.kill_to}", flush=True)
    print("# strategy trial rank killed_after kill_to_next_step_s redone job_s undisturbed_s same_final_loss",
          flush=True)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="heft-recovery-") as tmp:
        for strategy in a.strategies.split(","):
            for t in range(a.trials):
                home = os.path.join(tmp, f"{strategy}-{t}")
                plain = run(home, spec(tmp, f"plain-{strategy}-{t}", strategy, a.steps, a.every),
                            f"plain-{strategy}-{t}")
                kill_after, rank = rnd.randint(a.kill_from, a.kill_to), rnd.randint(1, 3)
                name = f"kill-{strategy}-{t}"
                hit = run(home, spec(tmp, name, strategy, a.steps, a.every), name, kill_after, rank)
                same = hit["final"] is not None and hit["final"] == plain["final"]
                print(f"{strategy} {t} {rank} {kill_after} {hit['kill_to_next_step'] or float('nan'):.2f} "
                      f"{hit['redone']} {hit['seconds']:.1f} {plain['seconds']:.1f} {same}"
                      f"{'' if hit['code'] == 0 else ' exit ' + str(hit['code'])}", flush=True)
                rows.setdefault(strategy, []).append((hit, plain, same))
    print("\n| strategy | trials | kill to next step s, median (worst) | steps redone, median (worst) "
          "| job / undisturbed, median (worst) | final loss equal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for strategy, rs in rows.items():
        ks = [h["kill_to_next_step"] for h, _, _ in rs if h["kill_to_next_step"] is not None]
        rd = [h["redone"] for h, _, _ in rs if h["redone"] is not None]
        ratio = [h["seconds"] / p["seconds"] for h, p, _ in rs]
        print(f"| {strategy} | {len(rs)} | {statistics.median(ks):.1f} ({max(ks):.1f}) | "
              f"{statistics.median(rd):.0f} ({max(rd)}) | {statistics.median(ratio):.2f} "
              f"({max(ratio):.2f}) | {sum(s for _, _, s in rs)} of {len(rs)} |")


if __name__ == "__main__":
    sys.exit(main())
