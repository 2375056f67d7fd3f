# ctest-labels: multiproc
"""examples/gpt_sharded.py under `heft run --hosts 2 -n 1` (2 simulated hosts, so the
collectives go over TCP; a small GPT, 6 steps): ShardedDataParallel
ends with DDP's loss (relative 1e-5) at half of DDP's training state per rank, bf16 within
3e-2; with HEFT_PROFILE_DIR each rank writes one step line per step in heft's step-profile
format, the sharded run's communication phase above zero; saved to --checkpoint_dir and run
again to 9 steps, it resumes at step 6 and ends with the loss of an uninterrupted 9-step run.
torch's FSDP2 on backend heft gives FSDP2-on-Gloo's losses."""
import os
import re
import tempfile
import unittest

import support

EXAMPLE = os.path.join(support.SOURCE_DIR, "examples", "gpt_sharded.py")
SMALL = ["--n_layer", "2", "--n_embd", "64", "--n_head", "4", "--block_size", "32",
         "--batch_size", "8", "--log_every", "3"]


def run(*extra, env=None):
    r = support.heft_run(["--hosts", "2", "-n", "1", "--", support.PYTHON, "-u", EXAMPLE] + SMALL + list(extra),
                         timeout=240, env=env)
    m = re.search(r"\[rank 0\] final: rank=0 step=(\d+) loss=(\S+) .*state_bytes=(\d+)", r.stdout)
    return r, m


class Example(unittest.TestCase):
    def final(self, *extra, env=None):
        r, m = run(*extra, env=env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIsNotNone(m, r.stdout)
        print(m[0])
        return int(m[1]), float(m[2]), int(m[3])

    def test_sharded_equals_ddp_and_profiles_and_resumes(self):
        _, ddp_loss, ddp_state = self.final("--strategy", "ddp", "--steps", "6")
        with tempfile.TemporaryDirectory() as d:
            env = support.clean_env(HEFT_PROFILE_DIR=d)
            _, loss, state = self.final("--steps", "6", env=env)
            self.assertLessEqual(abs(loss - ddp_loss) / ddp_loss, 1e-5)
            self.assertLessEqual(state * 2, ddp_state + 64)
            for rank in (0, 1):
                with open(os.path.join(d, f"rank-{rank}.steps")) as f:
                    lines = [l.split() for l in f]
                self.assertEqual([int(l[0]) for l in lines], list(range(6)))
                self.assertTrue(all(len(l) == 8 for l in lines), lines)
                self.assertGreater(sum(float(l[6]) for l in lines), 0.0, lines)  # communication
        _, bf16, _ = self.final("--steps", "6", "--mixed_precision", "bf16")
        self.assertLessEqual(abs(bf16 - ddp_loss) / ddp_loss, 3e-2)
        _, straight, _ = self.final("--steps", "9")
        with tempfile.TemporaryDirectory() as d:
            self.final("--steps", "6", "--checkpoint_dir", d)
            step, resumed, _ = self.final("--steps", "9", "--checkpoint_dir", d)
            self.assertEqual(step, 9)
            self.assertLessEqual(abs(resumed - straight) / straight, 1e-5)

    def test_fsdp2_on_heft_equals_fsdp2_on_gloo_and_ddp(self):
        """torch's FSDP2 script unchanged but for the backend's name: the same losses on heft as
        on Gloo (fp32, relative 1e-6), and DDP's within 1e-5; a heft-only strategy on Gloo is
        refused naming the flag."""
        _, gloo, _ = self.final("--strategy", "fsdp2", "--steps", "6")
        _, heft, _ = self.final("--strategy", "fsdp2", "--backend", "heft", "--steps", "6")
        _, ddp, _ = self.final("--strategy", "ddp", "--steps", "6")
        self.assertLessEqual(abs(heft - gloo) / gloo, 1e-6, (heft, gloo))
        self.assertLessEqual(abs(heft - ddp) / ddp, 1e-5, (heft, ddp))
        r, _ = run("--strategy", "sharded", "--backend", "gloo", "--steps", "2")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--backend gloo: --strategy sharded runs on heft only", r.stdout + r.stderr)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
