# ctest-labels: multiproc
"""The vendor's model-parallel library v1 (`import smdistributed.modelparallel.torch as smp`) on
heft (heft.torch.smp; docs/porting.md):
- tests/python/workers/smp_worker.py under `heft run -n 4 --distribution` with the library's
  dict (partitions 2, microbatches 4, interleaved, ddp): a traced nn.Module, 2 partitions x 4
  micro-batches x data 2, 3 SGD steps with momentum: every step's loss within TOLERANCE
  (relative, fp32) of one process on the whole batch, with the interleaved (1F1B) and simple
  (GPipe) pipelines, interleaved over 2 virtual stages, with smp.partition blocks (auto_partition false), and with partitions 1
  (micro-batches as gradient accumulation, DDP over 4); evaluation through @smp.step under
  no_grad equal too; smp.save/smp.load partial checkpoints round-trip (a model built from
  another seed, loaded before its first step, continues exactly as the saved one); the
  worker's steps go through smp.amp.GradScaler (scale, step, update); torchvision's
  VisionTransformer and resnet18 (GroupNorm), traced into layers, pipelined the same way,
  equal one process too;
- examples/smp/train_smp_v1.py, written as the vendor's examples are, with only the device
  patch: trains under `heft run -n 4` and as an estimator job with the library's dict (its
  accuracy parsed as a metric), and leaves its partial checkpoints;
- without the distribution nothing of the vendor's is on the path; keys heft does not run are
  refused by name before any group is joined."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import support
from smddp_test import ACCURACY, synthetic_mnist

TOLERANCE = 1e-5
PARAMETERS = {"partitions": 2, "microbatches": 4, "pipeline": "interleaved", "ddp": True}
SMP = json.dumps({"smdistributed": {"modelparallel": {"enabled": True,
                                                      "parameters": PARAMETERS}}})
EXAMPLE = os.path.join(support.SOURCE_DIR, "examples", "smp", "train_smp_v1.py")


class Worker(unittest.TestCase):
    """One `heft run -n 4` of the worker; each test reads its case."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="smp-test-")
        r = support.heft_run(["-n", "4", "--distribution", SMP, "--", support.PYTHON, "-u",
                              support.worker("smp_worker.py"), cls.tmp], timeout=300,
                             env=support.clean_env(OMP_NUM_THREADS="1"))
        cls.output = r.stdout + r.stderr
        cls.returncode = r.returncode
        cls.cases = {}
        for line in re.findall(r"^(?:\[rank 0\] )?CASE (.*)$", r.stdout, re.M):
            row = json.loads(line)
            cls.cases[row["case"]] = row

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def case(self, name):
        self.assertEqual(self.returncode, 0, self.output[-6000:])
        self.assertIn(name, self.cases, self.output[-6000:])
        return self.cases[name]

    def equivalent(self, row, what):
        print(f"{what}: losses {row['losses']}\n  one process {row['reference']}\n  largest "
              f"relative difference {row['worst']:.2e} (tolerance {TOLERANCE:g})")
        self.assertEqual(len(row["losses"]), 3)
        self.assertLessEqual(row["worst"], TOLERANCE, row)
        self.assertLess(row["losses"][-1], row["losses"][0] + 1.0)
        self.assertNotEqual(row["losses"][0], row["losses"][1])  # the optimizer stepped
        if "eval" in row:
            self.assertEqual(row["eval"][1], row["reference_eval"][1], row)
            self.assertLessEqual(row["eval_worst"], TOLERANCE, row)

    def test_the_ranks_the_library_reports(self):
        row = self.case("ranks")
        self.assertEqual((row["size"], row["pp"], row["dp"], row["local_size"]), (4, 2, 2, 4))

    def test_interleaved_pipeline_matches_one_process(self):
        row = self.case("interleaved")
        self.equivalent(row, "2 partitions x 4 micro-batches x data 2, interleaved")
        self.assertEqual((row["pp"], row["dp"]), (2, 2))
        self.assertEqual(row["mp_group"], [0, 1])  # cluster placement: a replica's ranks adjacent
        self.assertEqual(row["dp_group"], [0, 2])
        self.assertIn("2 stages", row["plan"])  # heft's partitioner cut the traced layers

    def test_interleaved_virtual_stages_match_one_process(self):
        row = self.case("virtual")
        self.equivalent(row, "2 partitions x 2 virtual stages x 4 micro-batches x data 2")
        self.assertIn("pipeline plan: 4 stages", row["plan"])  # 2 x 2 chunks

    def test_torchvision_models_traced_and_pipelined_match_one_process(self):
        for case, what in (("vit", "torchvision's VisionTransformer"),
                           ("resnet_group", "torchvision's resnet18 (GroupNorm)")):
            with self.subTest(case=case):
                row = self.case(case)
                print(f"{what}: {row['layers']} traced layers")
                print(f"{what}, 2 partitions x 4 micro-batches x data 2: losses "
                      f"{row['losses']}\n  one process {row['reference']}\n  largest relative "
                      f"difference {row['worst']:.2e} (tolerance {TOLERANCE:g})")
                self.assertGreater(row["layers"], 4)
                self.assertEqual(len(row["losses"]), 2)
                self.assertLessEqual(row["worst"], TOLERANCE, row)
                self.assertNotEqual(row["losses"][0], row["losses"][1])

    def test_simple_pipeline_matches_one_process(self):
        self.equivalent(self.case("simple"), "2 partitions x 4 micro-batches x data 2, simple")

    def test_partitions_1_accumulates_micro_batches_under_ddp(self):
        row = self.case("data_only")
        self.equivalent(row, "partitions 1, 4 micro-batches, data 4")
        self.assertEqual((row["pp"], row["dp"]), (1, 4))

    def test_smp_partition_blocks_place_the_layers(self):
        row = self.case("manual")
        self.equivalent(row, "smp.partition blocks, auto_partition false")
        self.assertEqual(self.case("manual_parts")["parts"], [
            ["conv1.bias", "conv1.weight", "conv2.bias", "conv2.weight"],
            ["fc1.bias", "fc1.weight", "fc2.bias", "fc2.weight", "fc3.bias", "fc3.weight"]])

    def test_partial_checkpoints_round_trip(self):
        row = self.case("checkpoint")
        print(f"saved and resumed: {row['after']} / {row['resumed']}")
        self.assertEqual(row["files"], ["smp_checkpoint.pt_0_0", "smp_checkpoint.pt_1_0"])
        self.assertEqual(row["resumed"], row["after"])  # bit for bit
        self.assertTrue(row["same_state"], row)
        self.assertLess(row["local_keys"], row["keys"])  # a partition's part, not the model


class Example(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.data = cls.tmp.name
        synthetic_mnist(cls.data)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_trained(self, out, returncode):
        self.assertEqual(returncode, 0, out[-4000:])
        m = ACCURACY.search(out)
        self.assertIsNotNone(m, out[-4000:])
        self.assertEqual(int(m[2]), 512)
        self.assertGreater(int(m[3]), 50, m[0])  # learned: chance is 10%

    def test_under_heft_run(self):
        checkpoints = os.path.join(self.data, "checkpoints")
        r = support.heft_run(["-n", "4", "--distribution", SMP, "--", support.PYTHON, "-u",
                              EXAMPLE, "--epochs", "1", "--data-path", self.data,
                              "--log-interval", "8", "--checkpoint-dir", checkpoints],
                             timeout=600, env=support.clean_env(OMP_NUM_THREADS="1"))
        self.check_trained(r.stdout + r.stderr, r.returncode)
        self.assertIn("Train Epoch: 1", r.stdout)
        self.assertEqual(sorted(os.listdir(checkpoints)),
                         ["pt_mnist_checkpoint.pt_0_0", "pt_mnist_checkpoint.pt_1_0"])

    def test_nothing_of_the_vendors_without_the_distribution(self):
        r = support.heft_run(["-n", "1", "--", support.PYTHON, "-u", EXAMPLE, "--epochs", "1",
                              "--data-path", self.data], timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("No module named 'smdistributed'", r.stdout + r.stderr)

    def test_as_an_estimator_job_with_the_accuracy_as_a_metric(self):
        with tempfile.TemporaryDirectory() as home:
            driver = f"""
from heft.estimator.pytorch import PyTorch
estimator = PyTorch(
    entry_point="train_smp_v1.py", source_dir={os.path.dirname(EXAMPLE)!r}, role="unused",
    framework_version="2.11", py_version="py3", instance_count=1, instance_type="ml.p4d.24xlarge",
    distribution={{"smdistributed": {{"modelparallel": {{"enabled": True,
                  "parameters": {{"partitions": 2, "microbatches": 4, "pipeline": "simple",
                                  "ddp": True, "placement_strategy": "spread"}}}}}},
                  "mpi": {{"enabled": True, "processes_per_host": 4}}}},
    hyperparameters={{"epochs": 1, "data-path": {self.data!r}, "log-interval": 8}},
    metric_definitions=[{{"Name": "test:accuracy",
                         "Regex": r"Accuracy: \\d+/\\d+ \\((\\d+)%\\)"}}],
    environment={{"OMP_NUM_THREADS": "1"}}, base_job_name="smp")
estimator.fit(wait=True)
job = estimator.latest_training_job.describe()
final = {{m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}}
print("status", job["TrainingJobStatus"], "accuracy", final.get("test:accuracy"))
print("checkpoints", job.get("CheckpointConfig"))
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


class Refused(unittest.TestCase):
    """Keys heft does not run, named before any process group is joined (no heft run here)."""

    def refused(self, config, *words):
        code = ("import sys, json\nimport heft.torch.smp as smp\n"
                f"smp.init(json.loads(sys.argv[1]))\n")
        r = subprocess.run([support.PYTHON, "-c", code, json.dumps(config)], capture_output=True,
                           text=True, timeout=120, env=support.clean_env(
                               PYTHONPATH=os.path.join(support.BINARY_DIR, "python")))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ValueError: smp.init: the config dict: ", r.stderr)
        for word in words:
            self.assertIn(word, r.stderr)
        self.assertNotIn("process group", r.stderr)

    def test_keys_heft_does_not_run(self):
        self.refused({"partitions": 2, "tensor_parallel_degree": 2}, "tensor_parallel_degree=2",
                     "heft.torch.sagemaker")
        self.refused({"fp16": True}, "fp16: not supported")
        self.refused({"horovod": True}, "horovod: not supported")
        self.refused({"sharded_data_parallel_degree": 2}, "sharded_data_parallel_degree=2")
        self.refused({"delayed_parameter_initialization": True},
                     "delayed_parameter_initialization is not supported")

    def test_bad_values_and_unknown_keys(self):
        self.refused({"partitions": 0}, "partitions: expected an integer from 1")
        self.refused({"pipeline": "zigzag"}, "pipeline", "zigzag")
        self.refused({"microbatchs": 4}, "microbatchs", "microbatches")
        self.refused({"random_seed": "x"}, "random_seed='x'")

    def test_names_the_library_has_and_heft_does_not(self):
        sys.path.insert(0, os.path.join(support.BINARY_DIR, "python"))
        import heft.torch.smp as smp
        with self.assertRaisesRegex(AttributeError, "smp.tensor_parallelism is not supported"):
            smp.tensor_parallelism  # noqa: B018
        with self.assertRaisesRegex(RuntimeError, r"call smp.init\(\) first"):
            smp.pp_rank()


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
