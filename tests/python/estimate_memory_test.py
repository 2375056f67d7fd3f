# ctest-labels: unit
"""heft.torch.parallel.estimate_memory: a rank's peak memory by component for a layout, from
a short measurement priced by the C++ memory model (layout_search.h evaluate). The components
sum to the total; DDP's parameters, gradients and AdamW state are the model's bytes x 1, 1, 2
and its bucket copy x 1; sharded over 2, half of each; a model that is not an nn.Sequential
(torchvision's resnet18) is cut into layers by torch.fx; bad layouts, optimizers and a
deferred (meta) model are refused naming what was wrong; require() refuses a layout the
machine cannot hold, naming the largest component and a layout that fits, and returns the
total where it fits. The model, its buffers and torch's generator are left as they were.
bench/memory_estimate.py compares the prediction with real runs' peak RSS."""
import unittest

import torch

import support  # noqa: F401  (the build's heft package on the path)
from heft.torch import parallel


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(),
                               torch.nn.Linear(1024, 256))


PARAM_BYTES = (256 * 1024 + 1024 + 1024 * 256 + 256) * 4


class EstimateMemory(unittest.TestCase):
    def test_parts_sum_to_the_total_and_name_their_terms(self):
        x = torch.randn(16, 256)
        model = mlp()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        ddp = parallel.estimate_memory(model, x, "ddp", world=2)
        # The step probe ran three AdamW steps on the model's own parameters and put them back.
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        self.assertTrue(all(p.grad is None for p in model.parameters()))
        self.assertEqual(sum(ddp.parts.values()), ddp.total_bytes)
        self.assertEqual(ddp.layout["data"], 2)
        self.assertEqual(ddp.parts["parameters"], PARAM_BYTES)
        self.assertEqual(ddp.parts["gradients"], PARAM_BYTES)
        self.assertEqual(ddp.parts["optimizer_state"], 2 * PARAM_BYTES)  # AdamW's two moments
        self.assertEqual(ddp.parts["gradient_buffers"], PARAM_BYTES)    # DDP's bucket copy
        self.assertGreater(ddp.parts["activations"], 16 * 1024 * 4)     # the hidden layer's output
        self.assertGreater(ddp.parts["runtime"], 50 << 20)               # torch itself
        # The probe's figure is the resident set's growth over the step: 0 is a true reading
        # when the user's allocator already holds (freed by the layer measurement before it)
        # all the step needs; the probe leaves the process's allocator untrimmed.
        self.assertIn("step_peak_bytes", ddp.options)
        self.assertGreaterEqual(ddp.options["step_peak_bytes"], 0)
        sharded = parallel.estimate_memory(mlp(), x, "sharded", world=2)
        self.assertEqual(sum(sharded.parts.values()), sharded.total_bytes)
        self.assertEqual(sharded.parts["parameters"], PARAM_BYTES // 2)
        self.assertEqual(sharded.parts["optimizer_state"], PARAM_BYTES)
        self.assertGreater(sharded.parts["gathered_parameters"], 0)
        sgd = parallel.estimate_memory(mlp(), x, {"data": 2}, optimizer="sgd")
        self.assertEqual(sgd.parts["optimizer_state"], 0)
        self.assertIn("optimizer_state", ddp.describe())

    def test_a_model_that_is_not_a_sequential_is_cut_by_fx(self):
        from torchvision.models import resnet18
        torch.manual_seed(0)
        model = resnet18(num_classes=10, norm_layer=lambda c: torch.nn.GroupNorm(32, c))
        before = {k: v.clone() for k, v in model.state_dict().items()}
        x = torch.randn(4, 3, 32, 32)
        rng = torch.get_rng_state()
        est = parallel.estimate_memory(model, x, "ddp", world=1,
                                       loss_fn=lambda y: y.square().mean())
        self.assertEqual(sum(est.parts.values()), est.total_bytes)
        n = sum(p.numel() for p in model.parameters())
        self.assertEqual(est.parts["parameters"], 4 * n)
        self.assertEqual(est.parts["gradient_buffers"], 0)  # one process: no buckets
        self.assertGreater(est.parts["activations"], 0)
        for k, v in model.state_dict().items():
            self.assertTrue(torch.equal(v, before[k]), k)
        self.assertTrue(torch.equal(torch.get_rng_state(), rng))
        self.assertTrue(all(p.grad is None for p in model.parameters()))

    def test_bad_input_is_refused_naming_it(self):
        x = torch.randn(4, 256)
        with self.assertRaisesRegex(ValueError, "layout key 'stages'"):
            parallel.estimate_memory(mlp(), x, {"stages": 2})
        with self.assertRaisesRegex(ValueError, "layout='zero3'"):
            parallel.estimate_memory(mlp(), x, "zero3")
        with self.assertRaisesRegex(ValueError, "world=0"):
            parallel.estimate_memory(mlp(), x, "ddp", world=0)
        with self.assertRaisesRegex(ValueError, "layout data=0"):
            parallel.estimate_memory(mlp(), x, {"data": 0})
        with self.assertRaisesRegex(ValueError, "optimizer='lion'"):
            parallel.estimate_memory(mlp(), x, optimizer="lion")
        with self.assertRaisesRegex(ValueError, "example_batch"):
            parallel.estimate_memory(mlp(), [x])
        with parallel.deferred_init():
            meta = torch.nn.Sequential(torch.nn.Linear(256, 256))
        with self.assertRaisesRegex(ValueError, "meta device .deferred_init."):
            parallel.estimate_memory(meta, x)

    def test_require_refuses_naming_the_largest_part_and_a_layout_that_fits(self):
        x = torch.randn(16, 256)
        est = parallel.estimate_memory(mlp(), x, "ddp", world=2)
        self.assertEqual(est.require(available=est.total_bytes * 2, ranks=2), est.total_bytes)
        with self.assertRaises(MemoryError) as e:
            est.require(available=est.total_bytes, ranks=2, what="train.py")
        text = str(e.exception)
        self.assertIn("train.py: data 2 x sharded 1", text)
        self.assertIn(f"largest: {est.largest_part()[0]}", text)
        self.assertIn("2 rank(s) on this machine", text)
        self.assertRegex(text, "would fit|no layout of 2 ranks fits")
        with self.assertRaisesRegex(MemoryError, "no layout of 2 ranks fits"):
            est.require(available=1 << 20, ranks=2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
