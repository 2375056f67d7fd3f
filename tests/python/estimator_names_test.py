"""heft.estimator's job names and files: a job or tuning name that is not a job name ('../../x',
'/abs', 'a/b', '', too long, a newline or NUL in it) raises ValueError naming the argument
before anything is written anywhere; a valid fit keeps its spec, record, output and delivery
marker under $HEFT_HOME/sdk/ with mode 0600 (the spec holds the job's environment), and a
link planted in the home never sends a write outside it.
"""
import os
import stat
import sys
import tempfile
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
os.environ.setdefault("HEFT_BIN", support.HEFT)

import heft.estimator as sagemaker  # noqa: E402
from heft.estimator import _home  # noqa: E402
from heft.estimator.estimator import name_from_base  # noqa: E402
from heft.estimator.pytorch import PyTorch  # noqa: E402
from heft.estimator.tuner import ContinuousParameter, HyperparameterTuner  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SCORE = [{"Name": "score", "Regex": r"score=([-0-9.]+)"}]
EXPECTED = "expected letters, digits and '-' (not first or last), at most"


def tree(root):
    """Every path under `root` with its mode: what a refused fit must leave as it was."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            out[p] = os.lstat(p).st_mode
    return out


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


class NamesTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.home = os.path.join(self.tmp, "a", "home")  # '../../x' from sdk/ lands in tmp/a
        self.session = sagemaker.Session(heft_home=self.home)
        self.bad = ["../../x", "../x", os.path.join(self.tmp, "abs"), "a/b", "", ".", "..",
                    "a" * 64, "a\nb", "a\0b", "-a", "a-", "a_b", "a b", "tâche"]

    def tearDown(self):
        self._tmp.cleanup()

    def estimator(self, **kwargs):
        args = dict(entry_point="sdk_objective_script.py", source_dir=HERE,
                    sagemaker_session=self.session, metric_definitions=SCORE,
                    environment={"API_TOKEN": "not-for-others"})
        args.update(kwargs)
        return PyTorch(**args)

    def would_be(self, name, suffixes):
        sdk = os.path.join(self.home, "sdk")
        return [os.path.join(sdk, name + s) for s in suffixes if "\0" not in name]

    def assertRefusedBeforeWriting(self, argument, value, call, suffixes, limit=63):
        before = tree(self.tmp)
        with self.assertRaises(ValueError) as cm:
            call()
        message = str(cm.exception)
        self.assertIn(f"{argument}: {EXPECTED} {limit} characters", message)
        self.assertIn(repr(value) if len(value) <= 80 else repr(value[:80]), message)
        self.assertEqual(tree(self.tmp), before, f"{value!r} changed the tree")
        for path in self.would_be(value, suffixes):
            self.assertFalse(os.path.lexists(path), path)
        return message

    def test_bad_job_names_are_refused_before_anything_is_written(self):
        est = self.estimator()
        for name in self.bad:
            with self.subTest(name=name):
                self.assertRefusedBeforeWriting(
                    "PyTorch.fit: job_name", name, lambda: est.fit(job_name=name, logs=False),
                    (".yaml", ".json", ".out"))
                self.assertRefusedBeforeWriting(
                    "PyTorch.fit: job_name", name,
                    lambda: est.fit(job_name=name, wait=False), (".yaml", ".json", ".out"))
        self.assertFalse(os.path.exists(self.home))  # not even the home was made
        message = self.assertRefusedBeforeWriting(
            "PyTorch.fit: job_name", "a" * 200, lambda: est.fit(job_name="a" * 200), ())
        self.assertIn("(200 characters)", message)  # a long name is shown cut
        with self.assertRaises(ValueError) as cm:  # not a string
            est.fit(job_name=5)
        self.assertIn("job_name", str(cm.exception))
        self.assertIn("found 5", str(cm.exception))

    def test_bad_tuning_names_are_refused_before_anything_is_written(self):
        tuner = HyperparameterTuner(self.estimator(), "score", {"x": ContinuousParameter(0, 1)})
        for name in self.bad + ["a" * 60]:  # trials add -NNN: 59 at most
            with self.subTest(name=name):
                self.assertRefusedBeforeWriting(
                    "HyperparameterTuner.fit: job_name", name,
                    lambda: tuner.fit(job_name=name, wait=False),
                    (".tuning.yaml", ".tuning.json", ".tuning.out"), limit=59)
        many = HyperparameterTuner(self.estimator(), "score", {"x": ContinuousParameter(0, 1)},
                                   max_jobs=1000)
        message = self.assertRefusedBeforeWriting(
            "HyperparameterTuner.fit: job_name", "a" * 59,
            lambda: many.fit(job_name="a" * 59), (".tuning.yaml",), limit=58)
        self.assertIn("(trials add -NNNN)", message)
        self.assertFalse(os.path.exists(self.home))

    def test_bad_base_names_are_refused_up_front(self):
        for name in ["../../x", "a/b", "", "a" * 64, "a\nb"]:
            with self.subTest(name=name):
                self.assertRefusedBeforeWriting(
                    "PyTorch: base_job_name", name,
                    lambda: self.estimator(base_job_name=name), ())
                self.assertRefusedBeforeWriting(
                    "HyperparameterTuner: base_tuning_job_name", name,
                    lambda: HyperparameterTuner(self.estimator(), "score",
                                                {"x": ContinuousParameter(0, 1)},
                                                base_tuning_job_name=name), ())
                est = self.estimator()
                est.base_job_name = name or "-"  # set after construction: fit checks it
                self.assertRefusedBeforeWriting("PyTorch.fit: base_job_name", name or "-",
                                                lambda: est.fit(wait=False), ())
        self.assertFalse(os.path.exists(self.home))
        # A long valid base is cut to fit, as the cloud SDK's name_from_base does.
        name = name_from_base("b" * 63)
        self.assertEqual(len(name), 63)
        self.assertRegex(name, r"^b+-\d{4}(-\d\d){5}-\d{3}$")

    def test_a_valid_fit_keeps_private_files_inside_the_home(self):
        out = os.path.join(self.tmp, "out")
        est = self.estimator(hyperparameters={"x": 0.3}, output_path="file://" + out)
        est.fit(job_name="private-files", wait=False)
        self.assertEqual(est.latest_training_job.wait(logs=False), "Completed")
        sdk = os.path.join(self.home, "sdk")
        self.assertEqual(mode(self.home), 0o700)
        self.assertEqual(mode(sdk), 0o700)
        names = sorted(os.listdir(sdk))
        self.assertEqual(names, ["private-files" + s
                                 for s in (".delivered", ".json", ".out", ".yaml")])
        for n in names:
            with self.subTest(file=n):
                self.assertEqual(mode(os.path.join(sdk, n)), 0o600)
        with open(os.path.join(sdk, "private-files.yaml")) as f:
            self.assertIn("not-for-others", f.read())  # why 0600 matters
        print(f"{sdk}: " + ", ".join(f"{n} {mode(os.path.join(sdk, n)):o}" for n in names))


class HomeFilesTest(unittest.TestCase):
    """_home: the one way the SDK writes into heft's home."""

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.home = os.path.join(self.tmp, "home")
        self.outside = os.path.join(self.tmp, "outside")
        os.makedirs(self.outside)

    def tearDown(self):
        self._tmp.cleanup()

    def test_a_link_planted_at_the_name_is_replaced_not_followed(self):
        sdk = _home.sdk_dir(self.home)
        victim = os.path.join(self.outside, "victim")
        with open(victim, "w") as f:
            f.write("untouched\n")
        os.symlink(victim, os.path.join(sdk, "job.yaml"))
        written = _home.write_private(self.home, os.path.join(sdk, "job.yaml"), "spec\n")
        self.assertFalse(os.path.islink(written))
        self.assertEqual(mode(written), 0o600)
        with open(victim) as f:
            self.assertEqual(f.read(), "untouched\n")
        os.symlink(victim, os.path.join(sdk, "job.out"))
        with _home.open_private(self.home, os.path.join(sdk, "job.out")) as f:
            f.write("log\n")
        self.assertEqual(mode(os.path.join(sdk, "job.out")), 0o600)
        with open(victim) as f:
            self.assertEqual(f.read(), "untouched\n")
        self.assertEqual(sorted(os.listdir(sdk)), ["job.out", "job.yaml"])  # no temporaries

    def test_paths_that_resolve_outside_the_home_are_refused(self):
        sdk = _home.sdk_dir(self.home)
        for path in [os.path.join(sdk, "..", "..", "x"), os.path.join(self.outside, "x"),
                     os.path.join(sdk, ".."), self.home]:
            with self.subTest(path=path):
                with self.assertRaises(ValueError):
                    _home.write_private(self.home, path, "x")
        os.rmdir(sdk)
        os.symlink(self.outside, sdk)  # a link planted at the home's sdk folder
        with self.assertRaises(ValueError) as cm:
            _home.sdk_dir(self.home)
        self.assertIn("outside heft's home", str(cm.exception))
        session = sagemaker.Session(heft_home=self.home)
        est = PyTorch(entry_point="sdk_objective_script.py", source_dir=HERE,
                      sagemaker_session=session, environment={"API_TOKEN": "t"})
        with self.assertRaises(ValueError):
            est.fit(job_name="linked", logs=False)
        os.symlink(self.outside, os.path.join(self.home, "data"))
        with self.assertRaises(ValueError):
            session.upload_data(HERE, key_prefix="p")
        self.assertEqual(os.listdir(self.outside), [])


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
