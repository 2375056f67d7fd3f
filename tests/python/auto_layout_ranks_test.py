# ctest-labels: multiproc
"""heft.torch.parallel.auto_layout on 2 real ranks of the heft backend: the collective costs
are measured on the default group (comm_measure.h through _c10d.parallel.layout.measure,
every row positive), every rank prices rank 0's profile, so both ranks get the same plan and
the same measured rows; the host terms (inflation, synchronisation delay) are measured on both
ranks at once and leave the model (weights, BatchNorm's statistics, gradients) and torch's
generator as they were. This file is also the worker (HEFT_AUTO_LAYOUT_WORKER=1): each rank
prints one `result ` JSON line."""
import json
import os
import sys
import unittest

import support


def worker():
    import torch
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    from heft.torch.parallel import layout as _auto_layout
    dist.init_process_group("heft", init_method="env://")
    torch.manual_seed(dist.get_rank())  # different weights: the plan must not depend on them
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(5)],
                                torch.nn.BatchNorm1d(64))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(4, 64)
    rng = torch.get_rng_state()
    plan = _auto_layout.auto_layout(model, x, world=2, memory_limit=1 << 30)
    rows = _auto_layout.measured_comm()
    t = plan.inputs
    out = {"layout": [plan.data, plan.sharded, plan.tensor, plan.pipeline, plan.microbatches,
                      plan.virtual_stages, plan.checkpointing], "step_s": plan.step_s,
           "measured": plan.comm_measured, "rows": rows,
           "ranked": [p["step_s"] for p in plan.ranked],
           "host": [t["host_compute_inflation"], t["host_step_inflation"],
                    [list(x) for x in t["host_sync"]], t["overlap_needs_idle_cores"]],
           # the probes ran the model's layers: its weights, running statistics, gradients
           # and torch's generator are as they were
           "untouched": all(torch.equal(before[k], v) for k, v in model.state_dict().items())
           and all(p.grad is None for p in model.parameters())
           and torch.equal(rng, torch.get_rng_state())}
    print("result " + json.dumps(out), flush=True)
    dist.destroy_process_group()


class AutoLayoutRanks(unittest.TestCase):
    def test_every_rank_gets_the_same_plan_from_measured_costs(self):
        results = support.run_ranks(2, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=180,
                                    env_of_rank=lambda r: {"HEFT_AUTO_LAYOUT_WORKER": "1"})
        text = support.describe(results)
        outs = []
        for rc, stdout, _ in results:
            self.assertEqual(rc, 0, text)
            lines = [l for l in stdout.splitlines() if l.startswith("result ")]
            self.assertEqual(len(lines), 1, text)
            outs.append(json.loads(lines[0][7:]))
        self.assertTrue(outs[0]["measured"], text)
        self.assertEqual(outs[0]["layout"], outs[1]["layout"])
        self.assertEqual(outs[0]["ranked"], outs[1]["ranked"])  # the same numbers, not close ones
        # The host terms (host_probe.h through _c10d.parallel.layout) measured on both ranks
        # at once, rank 0's on both: a positive inflation, a delay for the group of 2.
        self.assertEqual(outs[0]["host"], outs[1]["host"])
        compute, step, sync, idle = outs[0]["host"]
        self.assertGreater(compute, 0)
        self.assertGreater(step, 0)
        self.assertEqual([g for g, _ in sync], [2], text)
        self.assertGreaterEqual(sync[0][1], 0)
        self.assertTrue(idle)
        self.assertTrue(outs[0]["untouched"] and outs[1]["untouched"], text)
        rows = outs[0]["rows"]
        self.assertEqual(rows, outs[1]["rows"])
        self.assertEqual(sorted(r[0] for r in rows),
                         ["all_gather", "allreduce", "p2p", "reduce_scatter"])
        for name, group, alpha, beta in rows:
            self.assertEqual(group, 2)
            self.assertGreaterEqual(alpha, 0)
            self.assertGreater(alpha + 1e6 / beta, 0, name)


if __name__ == "__main__":
    if os.environ.get("HEFT_AUTO_LAYOUT_WORKER"):
        worker()
    else:
        unittest.main(verbosity=2)
