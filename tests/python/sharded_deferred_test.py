# ctest-labels: unit
"""heft.torch.parallel.deferred_init in one process: examples/gpt_sharded.py's GPT, whose
constructor initializes every module and then draws every weight again at the end (as
GPT-2-style models do), materializes under ShardedDataParallel with exactly one process's
values and leaves torch's generator where one process's constructor leaves it, while the
replay never holds more than the largest single parameter (each default init is known dead
once the final draw overwrites it). A constructor that reads a value (.item()) fails inside
the context with a clear error."""
import os
import sys
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
sys.path.insert(0, os.path.join(support.SOURCE_DIR, "examples"))

import torch  # noqa: E402

import gpt_sharded as G  # noqa: E402
from heft.torch.parallel import ShardedDataParallel, deferred_init  # noqa: E402


class DeferredInit(unittest.TestCase):
    def test_gpt_with_a_final_init_pass(self):
        torch.manual_seed(3)
        ref = G.GPT(3, 4, 64, 32)
        ref_next = torch.rand(4)
        torch.manual_seed(3)
        with deferred_init():
            model = G.GPT(3, 4, 64, 32)
        self.assertTrue(all(p.is_meta for p in model.parameters()))
        sharded = ShardedDataParallel(model, units=[G.Block])
        self.assertTrue(torch.equal(torch.rand(4), ref_next))
        full, expected = sharded.full_state_dict(), ref.state_dict()
        self.assertEqual(list(full), list(expected))
        for k, v in expected.items():
            self.assertTrue(torch.equal(full[k], v), k)
        largest = max(p.numel() * 4 for p in ref.parameters())
        total = sum(p.numel() * 4 for p in ref.parameters())
        print(f"replay peak {sharded.materialize_peak_bytes} bytes; largest parameter "
              f"{largest}; model {total}")
        self.assertLessEqual(sharded.materialize_peak_bytes, largest)
        idx = torch.randint(0, 256, (2, 16))
        self.assertTrue(torch.equal(sharded(idx), ref(idx)))

    def test_reading_a_value_inside_fails(self):
        class Reads(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.randn(3))
                self.scale = float(self.w.sum())

        with self.assertRaises(Exception):
            with deferred_init():
                Reads()


if __name__ == "__main__":
    unittest.main(verbosity=2)
