# ctest-labels: unit
"""heft.torch.parallel.auto_layout on one process (no ranks: it only profiles and searches):
a small Sequential on a world of 4 with room to spare gets a layout whose degrees multiply to
the world, within the limit, the fastest of the ranked ones; a limit nothing fits is a
ValueError naming the smallest memory a layout needs; a bad world is a ValueError naming it.
The model's terms are heft-train's, measured and passed to the C++ search: each layer's saved
bytes match what its forward keeps (a Linear's or ReLU's output: the input is the previous
layer's) within a tolerance, the per-call parts lie within the profiled times, the optimizer
step, the runtime's resident bytes and the host's cores are positive, and the predicted
memory holds the runtime's bytes (the old terms left all of these out); the optimizer's figures
are the C++ table's (heft-train's); a loss is priced as
transient bytes; a per-layer term of the wrong length is a ValueError naming it; a layer that
works in place (nn.ReLU(inplace=True)) is profiled; the tensor degree is 1 without a tensor
plan and one the plan can split the model into with one."""
import os
import sys
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))

import torch  # noqa: E402

from heft.torch.parallel import layout as _auto_layout  # noqa: E402


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])


def wide():
    """Linear(256, 256) + ReLU x 3: each layer's forward keeps its output, 32 x 256 floats."""
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


OUTPUT_BYTES = 32 * 256 * 4


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

    def test_the_model_terms_are_measured_and_priced(self):
        plan = _auto_layout.auto_layout(wide(), torch.randn(32, 256), world=4,
                                        memory_limit=1 << 32)
        t = plan.inputs
        self.assertEqual(len(t["saved_bytes"]), 6)
        for i, saved in enumerate(t["saved_bytes"]):  # the output, and the autograd node
            self.assertLess(abs(saved - OUTPUT_BYTES), 0.1 * OUTPUT_BYTES,
                            f"layer {i}: saved {saved} bytes, its output is {OUTPUT_BYTES}")
        self.assertEqual(t["transient_bytes"], OUTPUT_BYTES)  # no loss: the output's gradient
        rows = {r["layout"]["text"]: r for r in plan.ranked}
        self.assertEqual(len(t["forward_fixed_s"]), 6)
        for f, b in zip(t["forward_fixed_s"], t["backward_fixed_s"]):
            self.assertGreaterEqual(f, 0.0)
            self.assertGreaterEqual(b, 0.0)
        self.assertGreater(t["optimizer_s"], 0.0)
        self.assertGreater(t["fixed_bytes"], 10 << 20)  # Python and LibTorch resident
        self.assertGreaterEqual(t["host_cores"], 1.0)
        self.assertEqual(t["host_threads"], 4 * torch.get_num_threads())  # 4 ranks here
        self.assertGreaterEqual(t["host_load"], 0.0)
        for r in rows.values():  # every rank holds the runtime, and the step's temporaries
            self.assertGreater(r["memory_bytes"], t["fixed_bytes"])
            self.assertGreater(r["step_bytes"], 0)
        self.assertEqual(t["largest_tensor_bytes"], [256 * 256 * 4, 0] * 3)  # a weight; ReLU none
        self.assertEqual((t["backward_tensor_copies"], t["step_tensor_copies"]), (1.0, 2.0))
        self.assertGreater(t["profile_peak_bytes"], t["fixed_bytes"])
        self.assertGreaterEqual(t["profile_residue_bytes"], 0)

    def test_a_loss_is_priced_as_transient_bytes(self):
        plain = _auto_layout.auto_layout(wide(), torch.randn(32, 256), world=2,
                                         memory_limit=1 << 32)
        big = torch.nn.Linear(256, 4096)
        with_loss = _auto_layout.auto_layout(
            wide(), torch.randn(32, 256), world=2, memory_limit=1 << 32,
            loss_fn=lambda y: big(y).square().mean())  # holds (32, 4096) floats and more
        self.assertGreater(with_loss.inputs["transient_bytes"],
                           plain.inputs["transient_bytes"] + 32 * 4096 * 4 // 2)

    def test_a_term_of_the_wrong_length_names_it(self):
        rows = [("0:Linear", 1e-3, 2e-3, 1000, 100), ("1:Linear", 1e-3, 2e-3, 1000, 100)]
        options = dict(world=2, memory_limit=1 << 30, global_batch=8, profiled_batch=4,
                       optimizer_bytes_per_param_byte=2.0, saved_activation_factor=4.0,
                       tensor_allreduces_per_layer=2, heads=0, microbatches=[1],
                       virtual_stages=[1], checkpointing=[False], overlap_gradients=True,
                       saved_bytes=[100])
        with self.assertRaisesRegex(ValueError, "saved_bytes: expected 2 values"):
            _auto_layout._layout.search(rows, _auto_layout.DEFAULT_COMM, options)
        # The same rows priced with and without the runtime's bytes: the memory moves by them.
        options.update(saved_bytes=[100, 100])
        bare = _auto_layout._layout.search(rows, _auto_layout.DEFAULT_COMM, options)
        options.update(fixed_bytes=5 << 20)
        fixed = _auto_layout._layout.search(rows, _auto_layout.DEFAULT_COMM, options)
        self.assertEqual(fixed["ranked"][0]["memory_bytes"] - bare["ranked"][0]["memory_bytes"],
                         5 << 20)

    def test_a_layer_that_works_in_place_is_profiled(self):
        # torchvision's resnets: nn.ReLU(inplace=True) as a layer of its own. Profiled on a
        # leaf needing grad it raised "a leaf Variable that requires grad is being used in an
        # in-place operation" (heft plan --model on resnet18's children).
        torch.manual_seed(0)
        layers = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(inplace=True),
                                     torch.nn.Linear(64, 64), torch.nn.ReLU(inplace=True))
        plan = _auto_layout.auto_layout(layers, torch.randn(4, 64), world=2,
                                        memory_limit=1 << 30, loss_fn=lambda y: y.sum())
        self.assertEqual(plan.data * plan.sharded * plan.tensor * plan.pipeline, 2)

    def test_the_tensor_degree_is_one_the_model_can_split_into(self):
        # Without a tensor plan (a conv net, resnet18's children: heft plan --model chose tensor
        # 4 for it, which tensor_parallel cannot apply) only tensor 1; with one, the degrees
        # the plan splits the model into (Linear(64, 64): 2 and 4 divide 64; Linear(64, 6):
        # 2 divides 6, 4 does not).
        rows = lambda plan: {r["layout"]["tensor"] for r in plan.ranked}  # noqa: E731
        none = _auto_layout.auto_layout(model(), torch.randn(4, 64), world=4, memory_limit=1 << 30)
        self.assertEqual(rows(none), {1})
        self.assertIn("the model has no tensor plan", " ".join(d["reason"] for d in none.dropped))
        plan = {"0": "colwise", "1": "rowwise"}
        split = _auto_layout.auto_layout(model(), torch.randn(4, 64), world=4, memory_limit=1 << 30,
                                         tensor_plan=plan)
        self.assertEqual(rows(split), {1, 2, 4})
        narrow = torch.nn.Sequential(torch.nn.Linear(64, 6), torch.nn.ReLU(), torch.nn.Linear(6, 64))
        two = _auto_layout.auto_layout(narrow, torch.randn(4, 64), world=4, memory_limit=1 << 30,
                                       tensor_plan={"0": "colwise", "2": "rowwise"})
        self.assertEqual(rows(two), {1, 2})
        self.assertIn("its tensor plan splits by divisors of 2 only",
                      " ".join(d["reason"] for d in two.dropped))
        with self.assertRaisesRegex(ValueError, "plan pattern 'nothing.*' matches no module"):
            _auto_layout.auto_layout(model(), torch.randn(4, 64), world=4, memory_limit=1 << 30,
                                     tensor_plan={"nothing.*": "colwise"})

    def test_the_model_and_the_generator_are_left_as_they_were(self):
        # The profile runs the layers in training mode: BatchNorm's running statistics moved and
        # torch's generator advanced (on the profiling rank only) before.
        m = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64), torch.nn.Dropout(0.5))
        before = {k: v.clone() for k, v in m.state_dict().items()}
        x = torch.randn(4, 64)
        rng = torch.get_rng_state()
        _auto_layout.auto_layout(m, x, world=2, memory_limit=1 << 30)
        for k, v in m.state_dict().items():
            self.assertTrue(torch.equal(before[k], v), k)
        self.assertTrue(torch.equal(rng, torch.get_rng_state()))

    def test_the_optimizer_figures_are_the_c_plus_plus_tables(self):
        # One table (parallel/layout/optimizer_memory.h) for heft-train, auto_layout and the
        # memory pre-flight: plain SGD makes no temporary (this side said one before it).
        from heft.torch import _c10d
        from heft.torch.parallel import memory as _memory
        table = _c10d.parallel.layout.optimizer_memory()
        self.assertEqual(set(_auto_layout.OPTIMIZERS), set(_auto_layout.STEP_TENSOR_COPIES))
        for name in _auto_layout.OPTIMIZERS:
            self.assertEqual(_auto_layout.OPTIMIZER_STATE[name], table[name][0], name)
            self.assertEqual(_auto_layout.STEP_TENSOR_COPIES[name], table[name][2], name)
            self.assertEqual(_memory._OPTIMIZER_STATE[name], (table[name][0], table[name][1]), name)
        self.assertEqual(_auto_layout.STEP_TENSOR_COPIES["sgd"], 0)
        self.assertEqual(_auto_layout.STEP_TENSOR_COPIES["adamw"], 2)

    def test_bad_world(self):
        with self.assertRaisesRegex(ValueError, "world=0"):
            _auto_layout.auto_layout(model(), torch.randn(4, 64), world=0, memory_limit=1 << 30)


if __name__ == "__main__":
    unittest.main()
