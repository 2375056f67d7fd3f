# ctest-labels: multiproc
"""The vendor's data-parallel scripts run on heft as written (examples/smddp/: the current API,
backend "smddp", and the older one, which joins at import and brings its own DDP class), with
only the device patch, on MNIST-sized synthetic data in torchvision's on-disk layout:
- under `heft run -n 8 --distribution '{"smdistributed": {"dataparallel": {"enabled": true}}}'`,
  8 ranks on this machine: exit 0, the vendor's test line with a learned accuracy;
- without the distribution nothing of the vendor's is on the path (the import fails naming it);
- a bad --distribution is refused naming the option and the field;
- as an estimator job with that distribution dict (both scripts), the accuracy parsed as a
  metric."""
import os
import re
import subprocess
import tempfile
import unittest

import numpy as np

import support

EXAMPLES = os.path.join(support.SOURCE_DIR, "examples", "smddp")
SMDDP = '{"smdistributed": {"dataparallel": {"enabled": true}}}'
ACCURACY = re.compile(r"Test set: Average loss: [0-9.]+, Accuracy: (\d+)/(\d+) \((\d+)%\)")


def write_idx(path, array):
    """An MNIST idx file (big-endian magic: ubyte, then the dimensions)."""
    with open(path, "wb") as f:
        f.write(bytes([0, 0, 0x08, array.ndim]))
        for d in array.shape:
            f.write(int(d).to_bytes(4, "big"))
        f.write(array.astype(np.uint8).tobytes())


def synthetic_mnist(root, train=4096, test=512):
    """DIR/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte, as torchvision keeps MNIST: a
    digit is a bright 6x6 block at a place of its own, over noise."""
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for i, label in enumerate(labels):
            r, c = 2 + (label // 5) * 12, 2 + (label % 5) * 5
            images[i, r:r + 6, c:c + 4] = 255
        write_idx(os.path.join(raw, f"{prefix}-images-idx3-ubyte"), images)
        write_idx(os.path.join(raw, f"{prefix}-labels-idx1-ubyte"), labels)


class VendorDataParallel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = cls.tmp.name
        synthetic_mnist(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_script(self, script, distribution=SMDDP, ranks=8):
        args = [support.HEFT, "run", "-n", str(ranks)]
        if distribution is not None:
            args += ["--distribution", distribution]
        args += ["--", support.PYTHON, "-u", os.path.join(EXAMPLES, script), "--epochs", "1",
                 "--data-path", self.data, "--log-interval", "2"]
        return subprocess.run(args, capture_output=True, text=True, timeout=600,
                              env=support.clean_env(OMP_NUM_THREADS="1"))

    def check_trained(self, r):
        out = r.stdout + r.stderr
        self.assertEqual(r.returncode, 0, out[-4000:])
        m = ACCURACY.search(r.stdout)
        self.assertIsNotNone(m, out[-4000:])
        self.assertEqual(int(m[2]), 512)
        self.assertGreater(int(m[3]), 50, m[0])  # learned: chance is 10%
        self.assertIn("Train Epoch: 1", r.stdout)

    def test_current_api_on_8_ranks(self):
        self.check_trained(self.run_script("train_smddp.py"))

    def test_older_api_on_8_ranks(self):
        self.check_trained(self.run_script("train_smddp_v1.py"))

    def test_nothing_of_the_vendors_without_the_distribution(self):
        r = self.run_script("train_smddp.py", distribution=None, ranks=1)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("No module named 'smdistributed'", r.stdout + r.stderr)

    def test_a_bad_distribution_is_refused_naming_the_field(self):
        r = self.run_script("train_smddp.py", distribution='{"smdistributed": {"dataparalel": {}}}')
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--distribution", r.stderr)
        self.assertIn("dataparalel", r.stderr)
        r = self.run_script("train_smddp.py", distribution="[1]")
        self.assertIn("--distribution: expected a JSON object", r.stderr)

    def test_as_an_estimator_job_with_the_accuracy_as_a_metric(self):
        for script in ("train_smddp.py", "train_smddp_v1.py"):
            with self.subTest(script=script):
                self.estimator_job(script)

    def estimator_job(self, script):
        with tempfile.TemporaryDirectory() as home:
            driver = f"""
from heft.estimator.pytorch import PyTorch
estimator = PyTorch(
    entry_point={script!r}, source_dir={EXAMPLES!r}, role="unused",
    framework_version="2.11", py_version="py3", instance_count=1, instance_type="ml.p4d.24xlarge",
    processes_per_host=8,
    distribution={{"smdistributed": {{"dataparallel": {{"enabled": True}}}}}},
    hyperparameters={{"epochs": 1, "data-path": {self.data!r}, "log-interval": 2}},
    metric_definitions=[{{"Name": "test:accuracy",
                         "Regex": r"Accuracy: \\d+/\\d+ \\((\\d+)%\\)"}}],
    environment={{"OMP_NUM_THREADS": "1"}}, base_job_name="smddp")
estimator.fit(wait=True)
job = estimator.latest_training_job.describe()
final = {{m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}}
print("status", job["TrainingJobStatus"], "accuracy", final.get("test:accuracy"))
"""
            env = support.clean_env(HEFT_HOME=home, HEFT_BIN=support.HEFT,
                                    PYTHONPATH=os.path.join(support.BINARY_DIR, "python"))
            r = subprocess.run([support.PYTHON, "-u", "-c", driver], capture_output=True,
                               text=True, timeout=600, env=env)
            out = r.stdout + r.stderr
            self.assertEqual(r.returncode, 0, out[-4000:])
            m = re.search(r"^status (\S+) accuracy (\S+)$", r.stdout, re.M)
            self.assertIsNotNone(m, out[-4000:])
            self.assertEqual(m[1], "Completed", out[-4000:])
            self.assertGreater(float(m[2]), 50, out[-4000:])


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
