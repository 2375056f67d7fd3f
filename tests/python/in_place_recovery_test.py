# ctest-labels: multiproc
"""In-place recovery (retry.in_place, docs/recovery.md) with real processes: `heft train` of a
small GPT on 2 simulated hosts x 2 workers, one rank SIGKILLed from outside after a step.
For DDP, sharded (ZeRO-3 over 4), hybrid (shard 2 x replicate 2), tensor parallel (2 x data 2)
and pipeline (2 stages x data 2): the launcher restarted that
rank alone (one start, one in-place restart), the reporting rank printed its `recovered:` line
naming the newest step every rank held, no checkpoint was read, and every step's loss equals an
undisturbed run's (the printed digits, bit for bit on this deterministic model). A rank lost
with its buddy (rank + 2 holds its part): the group falls back to a restart from its
checkpoints and still ends equal. A spec asking for in_place under another launcher, or for a
script, is refused naming the field."""
import os
import re
import signal
import subprocess
import tempfile
import time
import unittest

import support

STEP = re.compile(r"^\[rank \d+\] step=(\d+) epoch=\d+ loss=(\S+)")  # the reporting rank's
STEPS = 24


PARAMETERS = {"sharded": "{sharded_data_parallel_degree: 4, placement_strategy: cluster}",
              "hybrid": "{sharded_data_parallel_degree: 2, placement_strategy: cluster}",
              "tensor": "{tensor_parallel_degree: 2}", "pipeline": "{partitions: 2, microbatches: 2}"}


def spec(folder, name, strategy, every=1000, launcher="local"):
    parallel = (f"distribution:\n  modelparallel:\n    enabled: true\n    parameters: {PARAMETERS[strategy]}\n"
                if strategy in PARAMETERS else "")
    path = os.path.join(folder, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"name: {name}\nentry_point: heft-train\n"
                f"hyperparameters: {{model: gpt, n_layer: 2, n_embd: 64, n_head: 4, block_size: 32,\n"
                f"  max_steps: {STEPS}, batch_size: 8, lr: 0.003, warmup_steps: 4, log_every: 1,\n"
                "  eval_every: 100000, generate: 0, seed: 5}\n"
                "inputs: {train: /usr/share/games/fortunes}\n"
                f"cluster: {{instance_count: 2, processes_per_host: 2, launcher: {launcher}}}\n"
                f"{parallel}checkpoint: {{every_steps: {every}, keep: 2}}\n"
                "retry: {max_attempts: 2, in_place: true}\n"
                "stopping: {max_runtime_s: 600, grace_s: 5, timeout_s: 60}\n")
    return path


def rank_pid(job, rank):
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if f"HEFT_JOB={job}".encode() in env and f"RANK={rank}".encode() in env and b"heft-train" in cmd:
            return int(pid)
    return None


def train(home, path, job, kill_after=None, ranks=()):
    """Runs the job, SIGKILLing `ranks` once the reporting rank printed step kill_after; (code, output,
    {rank: (its pid before the kill, its pid when the recovered: line came)} for the others)."""
    env = support.clean_env(HEFT_HOME=home)
    p = subprocess.Popen([support.HEFT, "train", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, env=env)
    lines, kept, killed = [], {}, False
    before = {}
    deadline = time.monotonic() + 300
    for line in p.stdout:
        lines.append(line)
        m = STEP.match(line)
        if m and not killed and kill_after is not None and int(m[1]) >= kill_after:
            before = {r: rank_pid(job, r) for r in range(4) if r not in ranks}
            for r in ranks:
                pid = rank_pid(job, r)
                if pid:
                    os.kill(pid, signal.SIGKILL)
            killed = True
        if re.match(r"\[rank \d+\] recovered:", line):
            kept = {r: (pid, rank_pid(job, r)) for r, pid in before.items()}
        if time.monotonic() > deadline:
            p.kill()
    p.wait()
    return p.returncode, "".join(lines), kept


def losses(out):
    """step -> the loss the reporting rank printed last for it."""
    return {int(m[1]): m[2] for m in map(STEP.match, out.splitlines()) if m}


class InPlaceRecovery(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="heft-in-place-")
        cls.plain = {}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def undisturbed(self, strategy):
        if strategy not in self.plain:
            name = f"plain-{strategy}"
            code, out, _ = train(os.path.join(self.tmp.name, name), spec(self.tmp.name, name, strategy), name)
            self.assertEqual(code, 0, out)
            self.plain[strategy] = losses(out)
            self.assertEqual(len(self.plain[strategy]), STEPS, out)
        return self.plain[strategy]

    def check_in_place(self, strategy, rank):
        want = self.undisturbed(strategy)
        name = f"kill-{strategy}"
        code, out, kept = train(os.path.join(self.tmp.name, name), spec(self.tmp.name, name, strategy), name,
                                kill_after=9, ranks=(rank,))
        self.assertEqual(code, 0, out)
        self.assertEqual(len(re.findall(r"restarted it alone", out)), 1, out)
        self.assertRegex(out, r"Completed after .* 1 start,", out)
        self.assertNotIn("resumed:", out)
        rec = re.search(r"^\[rank \d+\] recovered: generation=1 step=(\d+) source_rank=(-?\d+) restarted_ranks=1 "
                        r"state_bytes=(\d+) seconds=([0-9.]+)$", out, re.M)
        self.assertIsNotNone(rec, out)
        # Killed after step 9: the buddies' copies of a boundary are in before the next step's
        # first collective, so at most one step is redone (step 8's copies at the least).
        self.assertGreaterEqual(int(rec[1]), 8, out)
        self.assertEqual(int(rec[2]) >= 0, strategy == "ddp", out)  # a source rank for DDP; buddies else
        self.assertGreater(int(rec[3]), 0)
        self.assertEqual(losses(out), want, out)
        # Every strategy but DDP kept buddies' copies: what they took from the training thread.
        buddies = re.search(r"^\[rank \d+\] buddies: copies=(\d+) part_bytes=(\d+) copy_ms median=", out, re.M)
        self.assertEqual(buddies is not None, strategy != "ddp", out)
        if buddies:
            self.assertGreater(int(buddies[1]), 0, out)
            self.assertGreater(int(buddies[2]), 0, out)
        # The ranks not killed are the processes that were running before the kill, and each
        # held its state.
        self.assertEqual(sorted(kept), sorted(set(range(4)) - {rank}), out)
        for r, (pid, after) in kept.items():
            self.assertIsNotNone(pid)
            self.assertEqual(pid, after, f"rank {r} was restarted")
        self.assertEqual(len(re.findall(r"holding step \d+, waiting for the restarted rank", out)), 3, out)
        for r in range(4):
            self.assertIsNone(rank_pid(name, r), f"rank {r} outlived the job")

    def test_ddp_restarts_the_lost_rank_alone_and_ends_equal(self):
        self.check_in_place("ddp", 2)

    def test_sharded_takes_the_lost_part_from_its_buddy_and_ends_equal(self):
        self.check_in_place("sharded", 1)

    def test_hybrid_restarts_the_lost_rank_alone_and_ends_equal(self):
        self.check_in_place("hybrid", 3)

    def test_tensor_parallel_restarts_the_lost_rank_alone_and_ends_equal(self):
        self.check_in_place("tensor", 1)

    def test_pipeline_restarts_the_lost_rank_alone_and_ends_equal(self):
        self.check_in_place("pipeline", 2)

    def test_a_rank_lost_with_its_buddy_falls_back_to_the_checkpoints(self):
        want = self.undisturbed("sharded")
        name = "buddy-too"
        code, out, _ = train(os.path.join(self.tmp.name, name), spec(self.tmp.name, name, "sharded", every=4),
                             name, kill_after=10, ranks=(1, 3))
        self.assertEqual(code, 0, out)
        self.assertRegex(out, r"Completed after .* 2 starts,", out)
        self.assertRegex(out, r"\[rank 0\] resumed: step=\d+", out)
        self.assertEqual(losses(out), want, out)

    def test_in_place_under_another_launcher_or_for_a_script_is_refused_by_name(self):
        path = spec(self.tmp.name, "refused", "ddp", launcher="slurm")
        p = subprocess.run([support.HEFT, "train", path], capture_output=True, text=True, timeout=60,
                           env=support.clean_env(HEFT_HOME=os.path.join(self.tmp.name, "refused")))
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("retry.in_place", p.stderr)
        self.assertIn("needs cluster.launcher: local", p.stderr)
        script = spec(self.tmp.name, "script", "ddp")
        with open(script) as f:
            text = f.read().replace("entry_point: heft-train", "entry_point: [python3, train.py]")
        with open(script, "w") as f:
            f.write(text)
        p = subprocess.run([support.HEFT, "train", script], capture_output=True, text=True, timeout=60,
                           env=support.clean_env(HEFT_HOME=os.path.join(self.tmp.name, "script")))
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("retry.in_place", p.stderr)
        self.assertIn("needs entry_point: heft-train", p.stderr)


if __name__ == "__main__":
    support.main_guard()
    unittest.main()
