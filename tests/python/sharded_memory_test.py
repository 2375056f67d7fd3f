# ctest-labels: multiproc
"""heft.torch.parallel's memory pre-flight. A GPT of 203 billion parameters built under
deferred_init (nothing allocated), with `examples/gpt_sharded.py --strategy ddp` on 2 ranks
under `heft run`: it exits non-zero within a minute (a hang or an OOM kill would not), and
the output holds, from every rank, the MemoryError naming the parameter count, the need per
rank and on the machine, what is available and the sharded degree that would fit; started
by hand (no launcher stopping the others), every rank exits 1. training_state_bytes of a
small model equals the bytes of its real parameters, gradients and optimizer state after
one step, exactly (AdamW with a frozen parameter and a tied one, SGD with momentum, plain
SGD); and a bad optimizer name or degree is refused naming the argument.

ShardedDataParallel's own pre-flight (memory_check): its plan's components are the shards
(equal to training_state_bytes sharded, but for padding), the gathered units (the root and
two of the largest other; halved in bf16; every unit under zero_stage=2) and the gradients in
flight; a machine that cannot hold them gets a MemoryError naming every component, the root
unit and the options that fit; a user's script building a GPT with a 50k tied vocabulary
under deferred_init that no machine can train sharded over 2 ranks (39e9 parameters) is
refused by every rank of a heft run job within a minute, before a shard is allocated."""
import os
import re
import sys
import tempfile
import time
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
sys.path.insert(0, os.path.join(support.SOURCE_DIR, "examples"))

import torch  # noqa: E402

import gpt_sharded as G  # noqa: E402
from heft.torch import parallel  # noqa: E402
from heft.torch.parallel import memory as _memory  # noqa: E402
from heft.torch.parallel.sharded import _preflight, _units  # noqa: E402

EXAMPLE = os.path.join(support.SOURCE_DIR, "examples", "gpt_sharded.py")
HUGE = ["--n_layer", "112", "--n_embd", "12288", "--n_head", "96", "--block_size", "64",
        "--batch_size", "2", "--steps", "1"]


def real_state_bytes(model, opt):
    """What the model and optimizer hold: every distinct tensor's bytes."""
    tensors = list({id(p): p for p in model.parameters()}.values())
    tensors += [p.grad for p in tensors if p.grad is not None]
    tensors += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


class Preflight(unittest.TestCase):
    def test_ddp_of_a_model_no_machine_holds_is_refused_on_every_rank(self):
        with parallel.deferred_init():
            huge = G.GPT(112, 96, 12288, 64)
        count = parallel.parameter_count(huge)
        self.assertGreater(count, 2e11)
        start = time.monotonic()
        r = support.heft_run(["-n", "2", "--", support.PYTHON, "-u", EXAMPLE, "--strategy", "ddp"]
                             + HUGE, timeout=180)
        elapsed = time.monotonic() - start
        out = r.stdout + r.stderr
        print(out[-2000:])
        self.assertNotEqual(r.returncode, 0, out)
        self.assertLess(elapsed, 60, out)
        need = f"{count * 16 / 1e9:.1f} GB per rank"
        for rank in (0, 1):
            line = re.search(rf"\[rank {rank}\] MemoryError: gpt_sharded --strategy ddp: "
                             rf"{count:,} parameters, .*", out)
            self.assertIsNotNone(line, out)
            text = line[0]
            self.assertIn(need, text)
            self.assertIn("the 2 rank(s) on this machine need", text)
            self.assertRegex(text, r"and \d+\.\d GB is available \(MemAvailable\)")
            self.assertRegex(text, r"use ShardedDataParallel with sharded_degree >= \d+ ")
        self.assertNotIn("final:", out)
        # Started by hand (no launcher to stop the others): each rank's own exit status.
        results = support.run_ranks(2, [support.PYTHON, "-u", EXAMPLE, "--strategy", "ddp"] + HUGE,
                                    timeout=120)
        self.assertEqual([rc for rc, _, _ in results], [1, 1], support.describe(results))
        for _, _, err in results:
            self.assertIn(f"MemoryError: gpt_sharded --strategy ddp: {count:,} parameters", err)

    def test_training_state_bytes_is_exact_after_one_step(self):
        cases = [("adamw", lambda ps: torch.optim.AdamW(ps, lr=1e-3)),
                 ("sgd-momentum", lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9)),
                 ("sgd", lambda ps: torch.optim.SGD(ps, lr=1e-3))]
        for name, make in cases:
            torch.manual_seed(0)
            model = G.GPT(2, 4, 64, 32)  # tied embedding and head
            model.pos.weight.requires_grad_(False)  # a frozen parameter: no gradient, no state
            predicted = parallel.training_state_bytes(model, name)
            opt = make(model.parameters())
            x = torch.randint(0, 256, (2, 32))
            model(x).float().pow(2).mean().backward()
            opt.step()
            self.assertEqual(predicted, real_state_bytes(model, opt), name)
            with parallel.deferred_init():
                meta = G.GPT(2, 4, 64, 32)
            meta.pos.weight.requires_grad_(False)
            self.assertEqual(parallel.training_state_bytes(meta, name), predicted, name)

    def test_fits_and_bad_input(self):
        model = G.GPT(1, 2, 16, 8)
        need = parallel.training_state_bytes(model)
        self.assertEqual(parallel.require_memory(model, ranks=1), need)
        self.assertLessEqual(parallel.training_state_bytes(model, sharded_degree=4) * 4,
                             need + 64)
        with self.assertRaisesRegex(ValueError, r"optimizer='lamb': expected one of"):
            parallel.training_state_bytes(model, "lamb")
        with self.assertRaisesRegex(ValueError, r"sharded_degree=0: expected a positive"):
            parallel.training_state_bytes(model, sharded_degree=0)


SHARDED_SCRIPT = """
import sys
import torch.distributed as dist
import gpt_sharded as G
from heft.torch import parallel
dist.init_process_group("heft")
with parallel.deferred_init():
    model = G.GPT(48, 64, 8192, 64, 50257)
try:
    parallel.ShardedDataParallel(model, units=[G.Block])
except MemoryError as e:
    print(f"MemoryError: {e}", file=sys.stderr, flush=True)
    raise SystemExit(1)
print("constructed", flush=True)
"""


def specs_of(model, units=(G.Block,)):
    specs = _units.assign(model, _units.select_units(model, list(units)))
    return specs[:1] + [s for s in specs[1:] if s.params]


class ShardedPreflight(unittest.TestCase):
    def setUp(self):
        with parallel.deferred_init():
            self.model = G.GPT(3, 4, 64, 32, 1000)  # tied 1000-row embedding and head

    def test_plan_counts_shards_gathered_units_and_gradients_in_flight(self):
        f32, bf16 = torch.float32, torch.bfloat16
        specs = specs_of(self.model)
        parts, root, biggest = _preflight.plan(specs, 2, f32, f32, "adamw")
        self.assertEqual(list(parts), list(_preflight.PARTS))
        state = parts["parameters"] + parts["gradients"] + parts["optimizer_state"]
        exact = parallel.training_state_bytes(self.model, "adamw", 2)
        self.assertLessEqual(abs(state - exact), 16 * len(specs), (state, exact))
        self.assertEqual(root.numel, 1000 * 64 + 32 * 64 + 2 * 64)  # tok (tied head), pos, ln
        self.assertEqual(biggest.numel, sum(p.numel() for p in self.model.blocks[0].parameters()))
        self.assertEqual(parts["gathered_parameters"], (root.padded + 2 * biggest.padded) * 4)
        # The root's backward: its flat gradient and the tied weight's gradient being added.
        self.assertEqual(parts["gradients_in_flight"],
                         (root.padded + 1000 * 64) * 4 + 2 * biggest.padded * 4)
        slack = parts["allocator_slack"]
        self.assertEqual(slack, int(0.10 * (sum(parts.values()) - slack)) + (64 << 20))
        half, _, _ = _preflight.plan(specs, 2, bf16, f32, "adamw")
        self.assertEqual(half["gathered_parameters"] * 2, parts["gathered_parameters"])
        self.assertEqual(half["parameters"], parts["parameters"])  # fp32 master shards
        stage2, _, _ = _preflight.plan(specs, 2, f32, f32, "adamw", zero_stage=2)
        self.assertEqual(stage2["gathered_parameters"], sum(_preflight._Unit(s, 2).padded
                                                            for s in specs) * 4)
        sgd, _, _ = _preflight.plan(specs, 2, f32, f32, "sgd")
        self.assertEqual(sgd["optimizer_state"], 0)

    def test_a_machine_short_of_the_plan_is_refused_naming_components_and_options(self):
        specs = specs_of(self.model)
        parts, _, _ = _preflight.plan(specs, 4, torch.float32, torch.float32, "adamw")
        need = sum(parts.values())
        real = _memory.machines_needing
        try:
            # 4 ranks on a machine that has room for 3 and a bit.
            _memory.machines_needing = lambda n: [(4, int(3.5 * need), 4 * n)]
            with self.assertRaises(MemoryError) as caught:
                _preflight.check(self.model, specs, 4, torch.float32, torch.float32, "adamw",
                                 zero_stage=3, reductions_in_flight=2,
                                 options=[("mixed_precision='bf16'", lambda: {"x": need // 2}),
                                          ("units=9", lambda: {"x": need})])
            text = str(caught.exception)
            for part in ("parameters", "gradients", "adamw state", "gathered parameters",
                         "gradients in flight", "allocator slack"):
                self.assertIn(part, text)
            self.assertIn("sharded over 4 ranks", text)
            self.assertIn("the root unit (66,176 parameters: tok.weight, pos.weight", text)
            self.assertIn("the 4 rank(s) on this machine need", text)
            self.assertIn("it would fit with mixed_precision='bf16'", text)
            self.assertNotIn("units=9", text)  # the same need: does not fit
            self.assertIn("at most 3 rank(s) per machine (more machines)", text)
            self.assertIn("memory_check=False skips this check", text)
            _memory.machines_needing = lambda n: [(4, 4 * need, 4 * n)]
            self.assertEqual(_preflight.check(self.model, specs, 4, torch.float32,
                                              torch.float32, "adamw", zero_stage=3,
                                              reductions_in_flight=2, options=[]), parts)
        finally:
            _memory.machines_needing = real

    def test_one_process_keeps_its_plan_and_bad_memory_check_is_refused(self):
        torch.manual_seed(0)
        sdp = parallel.ShardedDataParallel(G.GPT(1, 2, 32, 16), units=[G.Block])
        self.assertEqual(list(sdp.memory_plan), list(_preflight.PARTS))
        self.assertGreater(sdp.memory_plan["optimizer_state"], 0)
        self.assertIsNone(parallel.ShardedDataParallel(G.GPT(1, 2, 32, 16),
                                                       memory_check=False).memory_plan)
        with self.assertRaisesRegex(ValueError, r"memory_check: optimizer='lamb': expected"):
            parallel.ShardedDataParallel(G.GPT(1, 2, 32, 16), memory_check="lamb")
        with self.assertRaisesRegex(ValueError, r"memory_check=True: expected an optimizer"):
            parallel.ShardedDataParallel(G.GPT(1, 2, 32, 16), memory_check=True)

    def test_each_use_of_a_tied_weight_adds_its_gradient_as_soon_as_it_is_made(self):
        torch.manual_seed(0)
        sdp = parallel.ShardedDataParallel(G.GPT(2, 2, 32, 16, 500), units=[G.Block])
        root = sdp.units[0]
        calls, real = [], root.accumulate
        root.accumulate = lambda i, g: (calls.append((i, tuple(g.shape))), real(i, g))[1]
        x = torch.randint(0, 256, (2, 16))
        sdp(x).float().pow(2).mean().backward()
        tied = (0, (500, 32))  # tok.weight, also the head's
        # The head's gradient first (the last module run), the embedding's last: two adds into
        # the flat gradient, never summed by autograd beside it.
        self.assertEqual(calls[0], tied, calls)
        self.assertEqual(calls[-1], tied, calls)
        self.assertEqual(calls.count(tied), 2, calls)
        self.assertGreater(sdp.units[0].shard.grad.abs().sum().item(), 0)

    def test_a_step_no_machine_holds_is_refused_by_every_rank_before_allocating(self):
        with parallel.deferred_init():
            model = G.GPT(48, 64, 8192, 64, 50257)
        count = parallel.parameter_count(model)
        self.assertGreater(count, 3.9e10)
        with tempfile.TemporaryDirectory() as tmp:
            script = os.path.join(tmp, "user_sharded.py")
            with open(script, "w") as f:
                f.write(SHARDED_SCRIPT)
            env = support.clean_env()
            env["PYTHONPATH"] = os.path.join(support.SOURCE_DIR, "examples")
            start = time.monotonic()
            r = support.heft_run(["-n", "2", "--", support.PYTHON, "-u", script], timeout=180,
                                 env=env)
            elapsed = time.monotonic() - start
        out = r.stdout + r.stderr
        self.assertNotEqual(r.returncode, 0, out[-3000:])
        self.assertLess(elapsed, 60, out[-3000:])
        self.assertNotIn("constructed", out)
        line = re.search(r"\[rank \d\] MemoryError: ShardedDataParallel: GPT "
                         rf"\({count:,} parameters\) sharded over 2 ranks needs .*", out)
        self.assertIsNotNone(line, out[-3000:])
        self.assertIn("gathered parameters", line[0])
        self.assertIn("the root unit (", line[0])
        self.assertIn("'blocks.0'", line[0])


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
