# ctest-labels: multiproc
"""examples/sdk_mnist.py, a driver script in the cloud SDK's style, runs on heft (--quick: a
2 x 2 training job of 10 steps of examples/pytorch_ddp.py on Fashion-MNIST, then a Bayesian
tuner of 2 trials): it exits 0, its training job Completed with the model saved, and the best
training job it prints is the tuning record's best."""
import json
import os
import re
import subprocess
import tempfile
import unittest

import support

DRIVER = os.path.join(support.SOURCE_DIR, "examples", "sdk_mnist.py")
DATA = "/usr/share/datasets/fashion-mnist"


class SdkExample(unittest.TestCase):
    def test_quick_run(self):
        if not os.path.isdir(DATA):
            self.skipTest(f"{DATA} is not installed (Debian's dataset-fashion-mnist)")
        with tempfile.TemporaryDirectory() as home:
            env = support.clean_env(HEFT_HOME=home, HEFT_BIN=support.HEFT,
                                    PYTHONPATH=os.path.join(support.BINARY_DIR, "python"))
            r = subprocess.run([support.PYTHON, "-u", DRIVER, "--quick"], capture_output=True,
                               text=True, timeout=600, env=env, cwd=support.SOURCE_DIR)
            out = r.stdout + r.stderr
            self.assertEqual(r.returncode, 0, out)
            m = re.search(r"^training job (\S+): Completed, billable ([0-9.]+) s", r.stdout, re.M)
            self.assertIsNotNone(m, out)
            self.assertGreater(float(m[2]), 0)
            self.assertIn("Starting -> Training -> Uploading -> Completed", r.stdout)
            self.assertTrue(os.path.isfile(os.path.join(home, "jobs", m[1], "model", "model.pt")))
            best = re.search(r"^tuning job (\S+): best training job (\S+)$", r.stdout, re.M)
            self.assertIsNotNone(best, out)
            tunings = json.loads(subprocess.run([support.HEFT, "tunings", "--json"],
                                                capture_output=True, text=True, env=env).stdout)
            self.assertEqual([t["name"] for t in tunings], [best[1]])
            self.assertEqual(tunings[0]["best_trial"]["name"], best[2])
            self.assertEqual(len(tunings[0]["trials"]), 2)


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
