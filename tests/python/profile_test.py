# ctest-labels: unit
"""heft.torch.profile writes its step lines through heft's C++ step profiler (the binding
heft.torch._c10d.step_profiler, whose format heft-train writes): one line a step,
"<step> <end unix s> <total ms>" and the five phases in ms, with the decimals of
src/heft/step_profiler/step_profiler.cc; a phase nested in another is taken out of it, so the
phases add up to at most the step; module-level phase() reports into the activated profiler
only; from_env() names the file after RANK; without a path nothing is written; an unknown
phase name is refused naming it. One process."""
import os
import re
import sys
import tempfile
import time
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))

from heft.torch import _c10d, profile  # noqa: E402

LINE = re.compile(r"^(\d+) (\d+\.\d{6}) (\d+\.\d{4})((?: \d+\.\d{4}){5})\n$")


def lines(path):
    with open(path) as f:
        return f.readlines()


class StepProfile(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "rank-0.steps")

    def tearDown(self):
        profile._active = None
        self.dir.cleanup()

    def test_line_format_written_by_the_cpp_profiler(self):
        p = profile.StepProfiler(self.path)
        self.assertIsInstance(p._cpp, _c10d.step_profiler.StepProfiler)  # the C++ path
        self.assertTrue(p.enabled)
        self.assertEqual(profile.PHASES, ("data", "forward", "backward", "communication", "optimizer"))
        before = time.time()
        for step in (7, 8):
            p.begin_step(step)
            with p.phase("data"):
                time.sleep(0.01)
            with p.phase("optimizer"):
                time.sleep(0.01)
            p.end_step()
        after = time.time()
        got = lines(self.path)
        self.assertEqual(len(got), 2, got)
        for step, line in zip((7, 8), got):
            m = LINE.match(line)
            self.assertIsNotNone(m, line)
            self.assertEqual(int(m[1]), step)
            self.assertTrue(before - 1e-3 <= float(m[2]) <= after + 1e-3, (before, line, after))
            phases = [float(x) for x in m[4].split()]
            self.assertGreaterEqual(phases[0], 10.0, line)  # slept 10 ms in data
            self.assertGreaterEqual(phases[4], 10.0, line)  # and 10 ms in optimizer
            self.assertEqual(phases[1:4], [0.0, 0.0, 0.0], line)
            self.assertLessEqual(sum(phases), float(m[3]), line)
        p.end_step()  # no step begun: nothing written
        self.assertEqual(len(lines(self.path)), 2)

    def test_nested_phase_is_taken_out_of_the_outer_one(self):
        p = profile.StepProfiler(self.path).activate()
        self.assertIs(profile.active(), p)
        p.begin_step(0)
        with p.phase("forward"):
            with profile.phase("communication"):  # as ShardedDataParallel's waits report
                time.sleep(0.2)
        p.end_step()
        fields = [float(x) for x in lines(self.path)[0].split()]
        total, forward, communication = fields[2], fields[4], fields[6]
        self.assertGreaterEqual(communication, 200.0, fields)
        # Counted in both, forward would also hold the 200 ms and the phases exceed the step.
        self.assertLessEqual(forward + communication, total, fields)

    def test_module_phase_without_an_active_profiler_writes_nothing(self):
        p = profile.StepProfiler(self.path)  # not activated
        self.assertIsNone(profile.active())
        p.begin_step(0)
        with profile.phase("communication"):
            time.sleep(0.01)
        p.end_step()
        self.assertEqual(float(lines(self.path)[0].split()[6]), 0.0)

    def test_from_env_and_disabled(self):
        old = {k: os.environ.get(k) for k in ("HEFT_PROFILE_DIR", "RANK")}
        try:
            os.environ["HEFT_PROFILE_DIR"] = self.dir.name
            os.environ["RANK"] = "3"
            p = profile.StepProfiler.from_env()
            self.assertTrue(p.enabled)
            p.begin_step(1)
            p.end_step()
            self.assertEqual(len(lines(os.path.join(self.dir.name, "rank-3.steps"))), 1)
            del os.environ["HEFT_PROFILE_DIR"]
            q = profile.StepProfiler.from_env().activate()
            self.assertFalse(q.enabled)
            self.assertIsNone(profile.active())
            q.begin_step(0)
            with q.phase("forward"), profile.phase("backward"):
                pass
            q.end_step()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.assertEqual(sorted(os.listdir(self.dir.name)), ["rank-3.steps"])

    def test_unknown_phase_is_refused_naming_it(self):
        for p in (profile.StepProfiler(self.path), profile.StepProfiler()):
            with self.assertRaises(ValueError) as ctx:
                with p.phase("fwd"):
                    pass
            self.assertIn("'fwd'", str(ctx.exception))
            self.assertIn("forward", str(ctx.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
