# ctest-labels: unit
"""Pipeline's partition="auto" profile (_pipeline_plan._profile over heft's C++ profile_layers),
in one process: each layer is timed as a step runs it. A layer after the first gets an input
that requires grad (the received activation's gradient goes back to the previous stage); the
first layer's input requires grad only when example_input does (a step's first stage
computes the input gradient only for inputs that require it), so a float input without grad
gives the first layer no input-gradient work in its profile. An in-place first layer does not
change example_input. The profile leaves every gradient unset."""
import os
import sys
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))

import torch  # noqa: E402
from heft.torch.parallel.pipeline import _plan as _pipeline_plan  # noqa: E402


class Probe(torch.nn.Module):
    """A Linear that records whether each input it gets requires grad."""

    def __init__(self):
        super().__init__()
        self.linear, self.seen = torch.nn.Linear(8, 8), []

    def forward(self, x):
        self.seen.append(x.requires_grad)
        return self.linear(x)


class FirstLayerProfile(unittest.TestCase):
    def profile(self, example):
        layers = [Probe(), Probe()]
        rows = _pipeline_plan._profile(layers, example)
        self.assertEqual(len(rows), 2)
        self.assertTrue(all(r[1] > 0 and r[2] > 0 for r in rows), rows)  # timed both ways
        self.assertTrue(all(p.grad is None for l in layers for p in l.parameters()))
        return [l.seen for l in layers]

    def test_first_layer_without_input_gradient_when_the_input_needs_none(self):
        first, second = self.profile(torch.randn(4, 8))
        self.assertGreater(len(first), 1)
        self.assertFalse(any(first[1:]), first)  # after the shape pass (no grad either)
        self.assertTrue(all(second[1:]), second)  # a received activation: its gradient

    def test_first_layer_with_input_gradient_when_the_input_needs_it(self):
        first, second = self.profile(torch.randn(4, 8, requires_grad=True))
        self.assertTrue(all(first[1:]), first)
        self.assertTrue(all(second[1:]), second)

    def test_an_in_place_first_layer_leaves_example_input(self):
        example = torch.randn(4, 8)
        before = example.clone()
        _pipeline_plan._profile([torch.nn.ReLU(inplace=True), torch.nn.Linear(8, 8)], example)
        self.assertTrue(torch.equal(example, before))


if __name__ == "__main__":
    unittest.main()
