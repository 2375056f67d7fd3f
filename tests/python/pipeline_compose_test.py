# ctest-labels: multiproc
"""Pipeline x tensor on 4 real ranks (issue 28 item 4): tp_gpt (pp_models.py: tp_models' GPT
as a sequence) under Pipeline(mesh=DeviceMesh(pipeline=2, tensor=2), tensor_plan=TP_PLAN)
trains 20 AdamW steps equal to one process on the global batch within relative 1e-5: every
step's loss, the stage's full parameters (its tensor slices joined by full_state_dict) and
evaluate's output; each rank holds only its slices (qkv 3d/2 rows); the activations between
stages go 1/2 of the hidden size per tensor rank (the received shape) and the exchange
counter equals the action list's communication batches. Cases: simple with 4 micro-batches
and interleaved with 2 virtual stages; on 8 ranks, x data 2 interleaved (DDP over each data
group, the chunks already split) and x sharded 2 (ShardedDataParallel; loss and evaluate
only: its parameters live in flat shards). Refused: tensor=2 without a tensor_plan, and a
pattern that names nothing, and a plan the whole model honours but one chunk cannot (a
rowwise layer whose colwise input is in the chunk before), each naming the argument, the
last on every rank. This file is also the worker
(HEFT_PP_WORKER=1)."""
import json
import os
import sys
import unittest

import support

STEPS, BATCH, LR, TOLERANCE = 20, 8, 3e-3, 1e-5
D = 16
CASES = [  # (mesh, Pipeline keyword arguments)
    ({"pipeline": 2, "tensor": 2}, {"microbatches": 4, "partition": [3]}),
    ({"pipeline": 2, "tensor": 2}, {"microbatches": 4, "schedule": "interleaved",
                                    "virtual_stages": 2, "partition": [2, 3, 4]}),
]
EIGHT = [  # x data 2: DDP, and ShardedDataParallel over the data (sharded) groups
    ({"pipeline": 2, "tensor": 2, "data": 2}, {"microbatches": 2, "schedule": "interleaved",
                                               "partition": [3]}),
    ({"pipeline": 2, "tensor": 2, "sharded": 2}, {"microbatches": 2, "partition": [3],
                                                  "data_parallel": "sharded"}),
]


def run_case(index, mesh_args, kwargs, meshes, ref):
    import torch
    import torch.distributed as dist
    from heft.torch.parallel import DeviceMesh, Pipeline
    from heft.torch.parallel.tensor import full_state_dict
    import pp_models as P
    key = json.dumps(mesh_args, sort_keys=True)
    if key not in meshes:
        meshes[key] = DeviceMesh(**mesh_args)
    mesh = meshes[key]
    ref_losses, _, ref_model = ref
    pipe = Pipeline(P.tp_gpt(), mesh, tensor_plan=P.TP_PLAN, **kwargs)
    opt = torch.optim.AdamW(pipe.parameters(), lr=LR)
    losses, per, d = [], BATCH // mesh.size("data"), mesh.coordinate("data")
    for step in range(STEPS):
        x, y = (t[d * per:(d + 1) * per] for t in P.tp_batch(step, BATCH))
        opt.zero_grad()
        losses.append(pipe.step(x, y, P.loss_fn("tp_gpt")))
        opt.step()
    out = {"case": index, "rank": dist.get_rank(), "stage": pipe.stage,
           "loss": P.relative(losses, ref_losses)}
    full, theirs = {}, ref_model.state_dict()
    if pipe.data_parallel != "sharded":  # (its parameters live in flat shards)
        for chunk in pipe.chunks:
            full.update(full_state_dict(getattr(chunk, "module", chunk)))
        out["params"] = P.relative([full[k] for k in sorted(full)],
                                   [theirs[k] for k in sorted(full)])
        out["keys"] = len(full)
        qkv = [p.shape[0] for n, p in pipe.named_parameters() if n.endswith("attn.qkv.weight")]
        out["qkv_rows"] = [sorted(set(qkv)), [3 * D // 2]]
    x, _ = P.tp_batch(99, per)
    out["evaluate"] = P.relative(pipe.evaluate(x), ref_model(x).detach())
    shapes = pipe._shapes[tuple(x[:per // kwargs["microbatches"]].shape)][0]
    out["received_last_dims"] = sorted({s[-1] for s in shapes.values()})
    out["exchanges"] = [pipe.counters["exchanges"],
                        P.communication_batches(pipe.schedule.actions(pipe.stage))]
    return out


def errors(mesh):
    from heft.torch.parallel import Pipeline
    import pp_models as P
    found = {}
    # "chunk": honoured by the whole model, but the cut after layer 1 leaves rowwise
    # 2.attn.qkv without its colwise input in chunk 1 (raised on every rank, stage 0 too).
    for what, plan in (("no_plan", None), ("nothing", {"*.attn.nothing": "colwise"}),
                       ("chunk", {"1.mlp.2": "colwise", "2.attn.qkv": "rowwise"})):
        try:
            Pipeline(P.tp_gpt(), mesh, microbatches=2, partition=[2], tensor_plan=plan)
            found[what] = None
        except (ValueError, TypeError) as e:
            found[what] = str(e)
    return found


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    import pp_models as P
    dist.init_process_group("heft", init_method="env://")
    meshes, ref = {}, P.reference("tp_gpt", STEPS, BATCH, LR)
    cases = CASES if dist.get_world_size() == 4 else EIGHT
    for i, (mesh_args, kwargs) in enumerate(cases):
        print("result " + json.dumps(run_case(i, mesh_args, kwargs, meshes, ref)), flush=True)
    if dist.get_world_size() == 4:
        print("errors " + json.dumps(errors(next(iter(meshes.values())))), flush=True)
    dist.destroy_process_group()


class PipelineTimesTensor(unittest.TestCase):
    def check(self, world, cases):
        results = support.run_ranks(world, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=240, env_of_rank=lambda r: {"HEFT_PP_WORKER": "1"})
        text = support.describe(results)
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        lines = [l for _, out, _ in results for l in out.splitlines()]
        rows = [json.loads(l[len("result "):]) for l in lines if l.startswith("result ")]
        self.assertEqual(len(rows), world * len(cases), text)
        for r in rows:
            what = f"{cases[r['case']]} rank {r['rank']}: {r}"
            self.assertLessEqual(r["loss"], TOLERANCE, what)
            self.assertLessEqual(r["evaluate"], TOLERANCE, what)
            if cases[r["case"]][1].get("data_parallel") != "sharded":
                self.assertLessEqual(r["params"], TOLERANCE, what)
                self.assertGreater(r["keys"], 0, what)
                self.assertEqual(r["qkv_rows"][0], r["qkv_rows"][1], what)  # only its slice
            self.assertEqual(r["received_last_dims"], [D // 2] if r["stage"] == 1 or
                             cases[r["case"]][1].get("virtual_stages", 1) > 1 else [], what)
            self.assertEqual(r["exchanges"][0], r["exchanges"][1], what)
        return lines, text

    def test_pipeline_2_x_tensor_2_x_data_2(self):
        self.check(8, EIGHT)

    def test_pipeline_2_x_tensor_2_equals_one_process(self):
        lines, text = self.check(4, CASES)
        found = [json.loads(l[len("errors "):]) for l in lines if l.startswith("errors ")]
        self.assertEqual(len(found), 4, text)
        self.assertIn("tensor_plan", found[0]["no_plan"] or "", text)
        self.assertIn("tensor_plan pattern '*.attn.nothing'", found[0]["nothing"] or "", text)
        for f in found:  # every rank, whichever stage holds the chunk
            self.assertIn("tensor_plan in chunk 1 (layers 2..5)", f["chunk"] or "", text)
            self.assertIn("'2.attn.qkv'", f["chunk"] or "", text)


if __name__ == "__main__":
    if os.environ.get("HEFT_PP_WORKER"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        worker()
    else:
        unittest.main(verbosity=2)
