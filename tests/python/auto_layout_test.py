# ctest-labels: unit
"""heft.torch.parallel.auto_layout on one process (no ranks: it only profiles and searches):
a small Sequential on a world of 4 with room to spare gets a layout whose degrees multiply to
the world, within the limit, the fastest of the ranked ones; a limit nothing fits is a
ValueError naming the smallest memory a layout needs; a bad world is a ValueError naming it."""
import os
import sys
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))

import torch  # noqa: E402

from heft.torch import _auto_layout  # noqa: E402


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])


class AutoLayoutTest(unittest.TestCase):
    def test_plan_within_the_limit(self):
        plan = _auto_layout.auto_layout(model(), torch.randn(4, 64), world=4,
                                        memory_limit=1 << 30)
        self.assertEqual(plan.data * plan.sharded * plan.tensor * plan.pipeline, 4)
        self.assertLessEqual(plan.memory_bytes, 1 << 30)
        self.assertEqual(plan.step_s, min(p["step_s"] for p in plan.ranked))
        self.assertIn("feasible layouts", plan.describe)

    def test_fits_nowhere(self):
        with self.assertRaisesRegex(ValueError, "memory_limit: no layout fits .*smallest needs"):
            _auto_layout.auto_layout(model(), torch.randn(4, 64), world=4, memory_limit=1000)

    def test_bad_world(self):
        with self.assertRaisesRegex(ValueError, "world=0"):
            _auto_layout.auto_layout(model(), torch.randn(4, 64), world=0, memory_limit=1 << 30)


if __name__ == "__main__":
    unittest.main()
