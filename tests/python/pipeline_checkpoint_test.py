# ctest-labels: multiproc
"""Pipeline checkpoints that reshard across pipeline and tensor degrees (issue 28 item 5), on
real ranks: tp_gpt (pp_models.py) trained 3 AdamW steps at pipeline 2 x tensor 2 (4 ranks)
and saved with Pipeline.save_checkpoint (heft's multi-writer checkpoint directory; the meta
carries layer -> stage and the tensor degree); then, in the same job, a fresh model at
pipeline 4 (tensor 1) loads it with its optimizer state: its parameters are bit-identical to
the saved model's full parameters (every stage's slices joined), and its next two steps'
losses equal the saved run's next two (relative 1e-5; the second depends on the AdamW state
having moved too); so do those of pipeline 2 x data 2 (DDP, another partition) and of
pipeline 2 x sharded 2 (ShardedDataParallel: the slices cut into its flat shards, with the
AdamW state), which saves it again at once: that checkpoint is bit-identical too.
In one process without a process group, Pipeline.load_full_state_dict
gives a plain nn.Sequential state_dict that loads strictly, bit-identical, with the same
next-step loss. A directory holding no checkpoint is refused naming dir=. This file is also
the worker (HEFT_PP_WORKER=save|one)."""
import json
import os
import sys
import tempfile
import unittest

import support

BATCH, LR, TOLERANCE = 8, 3e-3, 1e-5


def sums(state):
    """{key: the exact float64 sum, as hex}: equal only for bit-identical tensors (here)."""
    return {k: v.double().sum().item().hex() for k, v in state.items()}


def train(pipe, opt, steps):
    import pp_models as P
    losses, data = [], pipe.mesh.size("data")
    per, d = BATCH // data, pipe.mesh.coordinate("data")
    for step in steps:
        x, y = (t[d * per:(d + 1) * per] for t in P.tp_batch(step, BATCH))
        opt.zero_grad()
        losses.append(pipe.step(x, y, P.loss_fn("tp_gpt")))
        opt.step()
    return losses


def save_worker(directory):
    import torch
    import torch.distributed as dist
    import heft.torch  # noqa: F401
    from heft.torch.parallel import DeviceMesh, Pipeline
    from heft.torch.parallel.tensor import full_state_dict
    import pp_models as P
    dist.init_process_group("heft", init_method="env://")
    pipe = Pipeline(P.tp_gpt(), DeviceMesh(pipeline=2, tensor=2), microbatches=4,
                    schedule="interleaved", partition=[3], tensor_plan=P.TP_PLAN)
    opt = torch.optim.AdamW(pipe.parameters(), lr=LR)
    train(pipe, opt, range(3))
    step = pipe.save_checkpoint(directory, opt)
    full = {}
    for chunk in pipe.chunks:
        full.update(full_state_dict(chunk))
    out = {"saved": sums(full), "next": train(pipe, opt, range(3, 5)), "step": step}
    pipe4 = Pipeline(P.tp_gpt(), DeviceMesh(pipeline=4), microbatches=4, partition=[2, 3, 4])
    opt4 = torch.optim.AdamW(pipe4.parameters(), lr=LR)
    before = sums({k: v for c in pipe4.chunks for k, v in c.state_dict().items()})
    loaded, meta = pipe4.load_checkpoint(directory, opt4)
    out["loaded"] = sums({k: v for c in pipe4.chunks for k, v in c.state_dict().items()})
    out["changed"] = before != out["loaded"]
    out["next4"] = train(pipe4, opt4, range(3, 5))
    out["meta"] = [loaded, meta["layer_stage"], meta["tensor"], meta["pipeline"]]
    ddp = Pipeline(P.tp_gpt(), DeviceMesh(pipeline=2, data=2), microbatches=2, partition=[2])
    opt_ddp = torch.optim.AdamW(ddp.parameters(), lr=LR)
    ddp.load_checkpoint(directory, opt_ddp)  # each chunk wrapped by DDP
    out["next_ddp"] = train(ddp, opt_ddp, range(3, 5))
    sdp = Pipeline(P.tp_gpt(), DeviceMesh(pipeline=2, sharded=2), microbatches=2,
                   partition=[3], data_parallel="sharded")
    opt_sdp = torch.optim.AdamW(sdp.parameters(), lr=LR)
    sdp.load_checkpoint(directory, opt_sdp)  # each chunk's flat shards
    sdp.save_checkpoint(os.path.join(directory, "sharded"), opt_sdp)  # gathered back
    out["next_sdp"] = train(sdp, opt_sdp, range(3, 5))
    print("result " + json.dumps(out), flush=True)
    dist.destroy_process_group()


def one_worker(directory):
    import heft.torch  # noqa: F401
    from heft.torch.parallel import Pipeline
    import pp_models as P
    state = Pipeline.load_full_state_dict(directory)
    again = Pipeline.load_full_state_dict(os.path.join(directory, "sharded"))
    model = P.tp_gpt()
    model.load_state_dict(state, strict=True)
    x, y = P.tp_batch(3, BATCH)
    out = {"state": sums(model.state_dict()), "loss": P.loss_of("tp_gpt", model(x), y).item(),
           "sharded_state": sums(again)}
    try:
        Pipeline.load_full_state_dict(os.path.join(directory, "nothing-here"))
        out["refused"] = None
    except FileNotFoundError as e:
        out["refused"] = str(e)
    print("result " + json.dumps(out), flush=True)


def rows(testcase, results):
    text = support.describe(results)
    for rc, _, _ in results:
        testcase.assertEqual(rc, 0, text)
    return [json.loads(l[len("result "):]) for _, out, _ in results
            for l in out.splitlines() if l.startswith("result ")], text


class PipelineCheckpoint(unittest.TestCase):
    def test_save_at_pipeline_2_tensor_2_load_at_pipeline_4_and_one_process(self):
        command = [support.PYTHON, "-u", os.path.abspath(__file__)]
        with tempfile.TemporaryDirectory() as d:
            env = {"HEFT_PP_WORKER": "save", "HEFT_PP_DIR": d}
            saved, text = rows(self, support.run_ranks(4, command, 240, lambda r: env))
            self.assertEqual(len(saved), 4, text)
            full = {}
            for r in saved:
                full.update(r["saved"])
            next_losses = saved[0]["next"]
            for r in saved:
                self.assertEqual(r["meta"], [r["step"], [0, 0, 0, 1, 1, 1], 2, 2], text)
                self.assertTrue(r["changed"], text)  # the load moved the fresh model
                self.assertGreater(len(r["loaded"]), 0, text)
                for key, value in r["loaded"].items():  # bit-identical to the saved model
                    self.assertEqual(value, full[key], key)
                for a, b in zip(r["next4"] + r["next_ddp"] + r["next_sdp"], next_losses * 3):
                    self.assertLessEqual(abs(a - b) / abs(b), TOLERANCE, r)
            env = {"HEFT_PP_WORKER": "one", "HEFT_PP_DIR": d}
            one, text = rows(self, support.run_ranks(1, command, 120, lambda r: env))
            self.assertEqual(one[0]["state"], full, text)  # every key, bit-identical
            self.assertEqual(one[0]["sharded_state"], full, text)  # through the shards
            self.assertLessEqual(abs(one[0]["loss"] - next_losses[0]) / next_losses[0],
                                 TOLERANCE, text)
            self.assertIn("dir=", one[0]["refused"] or "", text)


if __name__ == "__main__":
    if os.environ.get("HEFT_PP_WORKER"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        (save_worker if os.environ["HEFT_PP_WORKER"] == "save" else one_worker)(
            os.environ["HEFT_PP_DIR"])
    else:
        unittest.main(verbosity=2)
