# ctest-labels: multiproc
"""examples/pytorch_ddp.py, an ordinary torchrun-style PyTorch DDP script, runs under
`heft run` on backend heft and on Gloo with nothing else changed, and
examples/pytorch-ddp.yaml runs it as a job with `heft train` (short: a slice of an epoch)."""
import os
import re
import subprocess
import tempfile
import unittest

import support

SCRIPT = os.path.join(support.SOURCE_DIR, "examples", "pytorch_ddp.py")
SPEC = os.path.join(support.SOURCE_DIR, "examples", "pytorch-ddp.yaml")


class Script(unittest.TestCase):
    def test_backend_name_is_the_only_change(self):
        for backend in ("heft", "gloo"):
            with self.subTest(backend=backend):
                r = support.heft_run(["--hosts", "2", "-n", "1", "--", support.PYTHON, "-u", SCRIPT,
                                      "--epochs", "1", "--limit", "1280", "--log_every", "10",
                                      "--backend", backend])
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                m = re.search(r"epoch=1 test_loss=\S+ test_acc=([0-9.]+) .* backend=(\w+)", r.stdout)
                self.assertIsNotNone(m, r.stdout + r.stderr)
                self.assertEqual(m[2], backend)
                self.assertGreater(float(m[1]), 0.5)  # 20 steps of SGD: well above chance (0.1)
                print(f"{backend}: test_acc={m[1]}")

    def test_as_a_job(self):
        with tempfile.TemporaryDirectory() as home:
            env = support.clean_env(HEFT_HOME=home)
            r = subprocess.run([support.HEFT, "train", SPEC, "--set", "hyperparameters.epochs=1",
                                "--set", "hyperparameters.limit=1280",
                                "--set", "hyperparameters.log_every=5"],
                               capture_output=True, text=True, timeout=300, env=env,
                               cwd=support.SOURCE_DIR)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            m = subprocess.run([support.HEFT, "metrics", "pytorch-ddp", "--name", "test:acc"],
                               capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(m.returncode, 0, m.stderr)
            self.assertRegex(m.stdout, r"0\.[5-9]")
            print(m.stdout.strip())


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
