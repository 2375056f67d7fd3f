# ctest-labels: multiproc
"""heft.torch.parallel's memory pre-flight. A GPT of 203 billion parameters built under
deferred_init (nothing allocated), with `examples/gpt_sharded.py --strategy ddp` on 2 ranks
under `heft run`: it exits non-zero within a minute (a hang or an OOM kill would not), and
the output holds, from every rank, the MemoryError naming the parameter count, the need per
rank and on the machine, what is available and the sharded degree that would fit; started
by hand (no launcher stopping the others), every rank exits 1. training_state_bytes of a
small model equals the bytes of its real parameters, gradients and optimizer state after
one step, exactly (AdamW with a frozen parameter and a tied one, SGD with momentum, plain
SGD); and a bad optimizer name or degree is refused naming the argument."""
import os
import re
import sys
import time
import unittest

import support

sys.path.append(os.path.join(support.BINARY_DIR, "python"))
sys.path.insert(0, os.path.join(support.SOURCE_DIR, "examples"))

import torch  # noqa: E402

import gpt_sharded as G  # noqa: E402
from heft.torch import parallel  # noqa: E402

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


if __name__ == "__main__":
    support.main_guard()
    unittest.main(verbosity=2)
