# ctest-labels: multiproc
"""heft.torch.parallel.ShardedDataParallel with real processes: a CNN, a GPT and a model with
a tied embedding/head and buffers (tests/python/sharded_models.py), at 2, 3 and 4 ranks and
hybrid 2 x 2, 20 AdamW steps with global-norm clipping: the loss of every step and the final
parameters equal one process on the global batch (relative 1e-5, fp32); bf16 within 3e-2 of
fp32's losses; activation checkpointing, ZeRO-2, sharded_degree=1 (replicas only) and
models built under deferred_init equal too, and so does accumulating 2 micro-batches per step. The counters show that a
gather was in flight while a unit computed and that reduce-scatters started before backward
ended. This file is also the worker (HEFT_SDP_WORKER=1): rank 0 prints one `case ` JSON line
per case."""
import json
import os
import sys

import support

STEPS, GLOBAL_BATCH, LR, CLIP = 20, 12, 3e-3, 0.5
FP32_TOL, BF16_TOL = 1e-5, 3e-2

# (model, sharded_degree or 0 for all, mixed_precision, activation_checkpointing, zero_stage,
#  built under deferred_init, micro-batches accumulated per step)
CASES = {
    2: [("cnn", 0, None, False, 3), ("gpt", 0, None, False, 3), ("tied", 0, None, False, 3),
        ("gpt", 0, None, True, 3), ("gpt", 0, "bf16", False, 3), ("gpt", 0, None, False, 2),
        ("tied", 0, None, False, 3, True), ("gpt", 0, "bf16-reduce", False, 3),
        ("cnn", 1, None, False, 3), ("tied", 0, None, False, 3, False, 2)],
    3: [("cnn", 0, None, False, 3), ("gpt", 0, None, False, 3), ("tied", 0, None, False, 3)],
    4: [("cnn", 0, None, False, 3), ("gpt", 0, None, False, 3), ("tied", 0, None, False, 3),
        ("cnn", 2, None, False, 3), ("gpt", 2, None, True, 3), ("tied", 2, None, False, 3),
        ("gpt", 0, None, False, 3, True), ("cnn", 2, None, False, 3, True)],
}


def reference(name):
    """One process on the global batch: the losses and the final state_dict."""
    import torch
    import sharded_models as M
    model = M.make(name)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = M.batch(name, step, 0, GLOBAL_BATCH)
        loss = M.loss_of(name, model(x), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


def sharded(name, degree, mixed, ckpt, stage, deferred=False, micro=1):
    import torch
    import torch.distributed as dist
    import sharded_models as M
    from heft.torch.parallel import ShardedDataParallel, deferred_init
    world, rank = dist.get_world_size(), dist.get_rank()
    units = [M.Block] if name == "gpt" else None
    if deferred:
        with deferred_init():
            module = M.make(name)
        assert all(p.is_meta for p in module.parameters())
    else:
        module = M.make(name)
    model = ShardedDataParallel(module, sharded_degree=degree or None, units=units,
                                mixed_precision=mixed, activation_checkpointing=ckpt,
                                zero_stage=stage)
    first = model.full_state_dict()
    fresh = M.make(name).state_dict()
    init_equal = sorted(first) == sorted(fresh) and all(torch.equal(first[k], v)
                                                         for k, v in fresh.items())
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    per = GLOBAL_BATCH // world
    losses, dtypes = [], set()
    for step in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for m in range(micro):  # gradient accumulation: each backward adds into .grad
            lo = rank * per + m * per // micro
            x, y = M.batch(name, step, lo, lo + per // micro)
            out = model(x)
            dtypes.add(str(out.dtype))
            loss = M.loss_of(name, out, y) / micro
            loss.backward()
            total += loss.detach()
        loss = total
        model.clip_grad_norm_(CLIP)
        opt.step()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)
    local = sum(p.numel() for p in model.parameters())
    counters = dict(model.counters, out_dtypes=sorted(dtypes), init_equal=init_equal,
                    materialize_peak_bytes=getattr(model, "materialize_peak_bytes", None))
    return losses, model.full_state_dict(), counters, local


def largest_module_bytes(name):
    import sharded_models as M
    return max(sum(4 * p.numel() for p in m.parameters(recurse=False))
               for m in M.make(name).modules())


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("heft", init_method="env://")
    world = dist.get_world_size()
    refs = {}
    for case in CASES[world]:
        name = case[0]
        if name not in refs:
            refs[name] = reference(name)
        ref_losses, ref_state = refs[name]
        losses, state, counters, local = sharded(*case)
        loss_diff = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        # Per tensor, relative in the 2-norm; the worst tensor.
        param_diff = max(float((state[k] - v).norm() / v.norm().clamp(min=1e-6))
                         for k, v in ref_state.items())
        if dist.get_rank() == 0:
            print("case " + json.dumps({
                "world": world, "case": list(case), "loss_diff": loss_diff,
                "param_diff": param_diff, "keys_equal": sorted(state) == sorted(ref_state),
                "counters": counters, "local_params": local,
                "full_params": sum(v.numel() for k, v in ref_state.items()),
                "largest_module_bytes": largest_module_bytes(name)}), flush=True)
    dist.destroy_process_group()


class ShardedEquivalence:
    """Mixed into unittest.TestCase below (kept apart so the worker needs no unittest)."""

    def check(self, world):
        results = support.run_ranks(world, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=240, env_of_rank=lambda r: {"HEFT_SDP_WORKER": "1"})
        text = support.describe(results)
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        cases = [json.loads(line[5:]) for line in results[0][1].splitlines()
                 if line.startswith("case ")]
        self.assertEqual(len(cases), len(CASES[world]), text)
        for c in cases:
            print(json.dumps(c))
            name, degree, mixed = c["case"][:3]
            tol = BF16_TOL if mixed else FP32_TOL
            self.assertTrue(c["keys_equal"], c)
            self.assertLessEqual(c["loss_diff"], tol, c)
            if not mixed:
                self.assertLessEqual(c["param_diff"], tol, c)
            k = c["counters"]
            # Initial values: one process's for the same seed (deferred: replayed per shard).
            self.assertTrue(k["init_equal"], c)
            if len(c["case"]) > 5 and c["case"][5]:  # deferred_init: one module's parameters at a time
                self.assertLessEqual(k["materialize_peak_bytes"], c["largest_module_bytes"], c)
                self.assertLess(k["materialize_peak_bytes"], 4 * c["full_params"], c)
            self.assertEqual(k["out_dtypes"], ["torch.bfloat16" if mixed else "torch.float32"], c)
            self.assertEqual(k["recomputed"] > 0, bool(c["case"][3]), c)
            if degree != 1:  # degree 1 replicates: no gathers to overlap
                self.assertGreater(k["gather_overlapped_compute"], 0, c)
                self.assertGreater(k["prefetched"], 0, c)
            self.assertGreater(k["reduce_scatters_before_backward_end"], 0, c)
            # At most 2 reduce-scatters in flight (each holds its unit's full gradient); with
            # more units than that in one backward, the cap waited for the oldest.
            self.assertLessEqual(k["max_reductions_in_flight"], 2, c)
            if (degree or world) > 1:
                self.assertEqual(k["max_reductions_in_flight"], 2, c)
                self.assertGreater(k["reductions_capped"], 0, c)
            self.assertEqual(k["replicate_allreduces"] > 0, degree not in (0, world), c)
            shards = (degree or world)
            # 1/N of the parameters per rank, plus at most one padding element per unit.
            self.assertLessEqual(c["local_params"] * shards, c["full_params"] + 8 * shards, c)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("HEFT_SDP_WORKER"):
        worker()
        sys.exit(0)
    import unittest

    class Sharded(ShardedEquivalence, unittest.TestCase):
        def test_two_ranks(self):
            self.check(2)

        def test_three_ranks(self):
            self.check(3)

        def test_four_ranks_and_hybrid_2x2(self):
            self.check(4)

    support.main_guard()
    unittest.main(verbosity=2)
