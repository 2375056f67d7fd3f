# ctest-labels: unit
"""heft.torch.parallel.ShardedDataParallel refuses bad input with an error naming the
argument: a unit policy that matches nothing, an unknown mixed precision, a degree that does
not divide the world, a non-float parameter, wrapping twice, an unknown ZeRO stage, a unit
mixing frozen and trainable parameters, a default group of another backend. One
process (a world of one heft rank where a group is needed)."""
import os
import sys
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import sharded_models as M  # noqa: E402
from heft.torch.parallel import ShardedDataParallel as SDP  # noqa: E402


class BadInput(unittest.TestCase):
    def refused(self, error, words, *args, **kwargs):
        with self.assertRaises(error) as ctx:
            SDP(*args, **kwargs)
        for w in words:
            self.assertIn(w, str(ctx.exception))
        return str(ctx.exception)

    def test_unit_policy_matching_nothing(self):
        self.refused(ValueError, ["units=", "matches no sub-module", "GPT"], M.make("gpt"),
                     units=[torch.nn.GRU])
        self.refused(ValueError, ["units=", "matches no sub-module"], M.make("gpt"),
                     units=lambda name, module: False)
        self.refused(TypeError, ["units=", "module classes"], M.make("gpt"), units=["Block"])
        self.refused(ValueError, ["units=0"], M.make("gpt"), units=0)

    def test_unknown_mixed_precision(self):
        self.refused(ValueError, ["mixed_precision='fp16'", "bf16"], M.make("cnn"),
                     mixed_precision="fp16")

    def test_unknown_zero_stage_and_checkpointing(self):
        self.refused(ValueError, ["zero_stage=1"], M.make("cnn"), zero_stage=1)
        self.refused(TypeError, ["activation_checkpointing='yes'"], M.make("cnn"),
                     activation_checkpointing="yes")

    def test_non_float_parameter(self):
        model = M.make("cnn")
        model.steps = torch.nn.Parameter(torch.zeros(3, dtype=torch.long), requires_grad=False)
        self.refused(TypeError, ["module", "'steps'", "torch.int64", "floating-point"], model)

    def test_frozen_and_trainable_in_one_unit(self):
        model = M.make("gpt")
        model.blocks[0].fc.weight.requires_grad_(False)
        self.refused(ValueError, ["units", "'blocks.0'", "blocks.0.fc.weight", "frozen"], model,
                     units=[M.Block])
        model = M.make("gpt")  # a whole unit frozen: its shard is too, and gets no gradient
        for p in model.blocks[1].parameters():
            p.requires_grad_(False)
        wrapped = SDP(model, units=[M.Block])
        x, y = M.batch("gpt", 0, 0, 2)
        M.loss_of("gpt", wrapped(x), y).backward()
        grads = [u.shard.grad is not None for u in wrapped.units]
        self.assertEqual(grads, [True, True, False])
        self.assertFalse(wrapped.units[2].shard.requires_grad)

    def test_wrapping_twice(self):
        model = M.make("cnn")
        wrapped = SDP(model)
        self.refused(ValueError, ["module", "already wrapped"], wrapped)
        self.refused(ValueError, ["module", "already wrapped"], model)
        self.refused(TypeError, ["module must be a torch.nn.Module"], "not a module")

    def test_degree_not_dividing_the_world(self):
        self.refused(ValueError, ["sharded_degree=2", "no process group"], M.make("cnn"),
                     sharded_degree=2)
        dist.init_process_group("heft", init_method=f"tcp://127.0.0.1:{support.free_port()}",
                                rank=0, world_size=1)
        try:
            self.refused(ValueError, ["sharded_degree=2", "dividing the world size 1"],
                         M.make("cnn"), sharded_degree=2)
            self.refused(ValueError, ["sharded_degree=0"], M.make("cnn"), sharded_degree=0)
            # A world of one: trains, and equals the plain model.
            ref, model = M.make("tied"), SDP(M.make("tied"), sharded_degree=1)
            x, y = M.batch("tied", 0, 0, 4)
            losses = [M.loss_of("tied", m(x), y) for m in (ref, model)]
            self.assertAlmostEqual(losses[0].item(), losses[1].item(), places=6)
            self.assertEqual(model.full_state_dict().keys(), ref.state_dict().keys())
        finally:
            dist.destroy_process_group()

    def test_another_backend(self):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{support.free_port()}",
                                rank=0, world_size=1)
        try:
            self.refused(RuntimeError, ["backend 'gloo'", "heft"], M.make("cnn"))
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    import heft.torch  # noqa: F401  (registers the backend)
    unittest.main(verbosity=2)
