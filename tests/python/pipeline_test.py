# ctest-labels: multiproc
"""heft.torch.parallel.Pipeline on real ranks (issue 28 items 3-4): each case trains a model
given as an nn.Sequential (pp_models.py: the test GPT as embeddings, blocks, head; and a CNN)
for 20 AdamW steps through heft's C++ action lists and must equal one process on the global
batch within relative 1e-5 (every step's loss, this stage's final parameters, and evaluate's
output); each stage's exchange counter equals its list's communication batches and its
in-flight micro-batches equal the simulator's and stay within active_microbatches; each rank
holds only its stage's parameters. 2 ranks: 2 stages, simple/interleaved/virtual, micro-
batches 1, 4, 8, auto and given partitions, and the refusals naming their argument; 4 ranks:
4 stages, pipeline 2 x data 2 (DDP, synchronised once per step, also with virtual stages),
pipeline 2 x sharded 2 (ShardedDataParallel, simple and interleaved); and a stage that dies
mid-step (every other rank raises, naming a lost stage, within 30 s). This file
is also the worker (HEFT_PP_WORKER=1; each rank prints `result ` JSON lines)."""
import json
import os
import sys
import unittest

import support

STEPS, BATCH, LR, TOLERANCE = 20, 8, 3e-3, 1e-5

TWO = [  # (model, mesh, Pipeline keyword arguments)
    ("gpt", {"pipeline": 2}, {"microbatches": 1}),
    ("gpt", {"pipeline": 2}, {"microbatches": 4, "partition": "auto"}),
    ("gpt", {"pipeline": 2}, {"microbatches": 8, "schedule": "interleaved",
                              "active_microbatches": 2}),
    ("gpt", {"pipeline": 2}, {"microbatches": 4, "schedule": "interleaved", "virtual_stages": 2}),
    ("cnn", {"pipeline": 2}, {"microbatches": 4, "partition": [5]}),
    ("cnn", {"pipeline": 2}, {"microbatches": 8, "schedule": "interleaved", "virtual_stages": 2,
                              "activation_checkpointing": True}),
]
FOUR = [
    ("gpt", {"pipeline": 4}, {"microbatches": 8, "schedule": "interleaved"}),
    ("gpt", {"pipeline": 4}, {"microbatches": 4, "schedule": "interleaved", "virtual_stages": 2}),
    ("cnn", {"pipeline": 4}, {"microbatches": 4}),
    ("gpt", {"pipeline": 2, "data": 2}, {"microbatches": 4, "schedule": "interleaved"}),
    ("cnn", {"pipeline": 2, "data": 2}, {"microbatches": 2}),
    ("gpt", {"pipeline": 2, "data": 2}, {"microbatches": 4, "schedule": "interleaved",
                                          "virtual_stages": 2, "partition": [2, 4, 6]}),
    ("gpt", {"pipeline": 2, "sharded": 2}, {"microbatches": 4, "data_parallel": "sharded"}),
    ("cnn", {"pipeline": 2, "sharded": 2}, {"microbatches": 2, "schedule": "interleaved",
                                            "data_parallel": "sharded", "partition": [4]}),
]


def run_case(index, name, mesh_args, kwargs, meshes, refs):
    import heft.torch
    import torch
    import torch.distributed as dist
    from heft.torch.parallel import DeviceMesh, Pipeline
    import pp_models as P
    import sharded_models as M
    key = json.dumps(mesh_args, sort_keys=True)
    if key not in meshes:
        meshes[key] = DeviceMesh(**mesh_args)
    mesh = meshes[key]
    if name not in refs:
        refs[name] = P.reference(name, STEPS, BATCH, LR)
    ref_losses, ref_params, ref_model = refs[name]
    data, d = mesh.size("data"), mesh.coordinate("data")
    per = BATCH // data
    model = P.MODELS[name]()
    kwargs = dict(kwargs)
    if kwargs.get("partition", "auto") == "auto":
        kwargs["example_input"] = M.batch(name, 0, 0, per // kwargs["microbatches"])[0]
    pipe = Pipeline(model, mesh, **kwargs)
    held = sum(p.numel() for p in pipe.parameters())
    freed = all(p.numel() == 0 for i, layer in enumerate(model)
                if not any(a <= i < b for a, b in pipe.layer_ranges) for p in layer.parameters())
    params = list(pipe.parameters())  # an auto partition may give a stage no parameters
    opt = torch.optim.AdamW(params, lr=LR) if params else None
    losses, data_ops, calls = [], [], [0]
    first = pipe.chunks[0].module if hasattr(pipe.chunks[0], "module") else pipe.chunks[0]
    first[0].register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    for step in range(STEPS):
        calls[0] = 0
        x, y = M.batch(name, step, d * per, (d + 1) * per)
        if opt:
            opt.zero_grad()
        before = heft.torch.backend_of(mesh.group("data")).operations() if data > 1 else 0
        losses.append(pipe.step(x, y, P.loss_fn(name)))
        data_ops.append(heft.torch.backend_of(mesh.group("data")).operations() - before if data > 1 else 0)
        if opt:
            opt.step()
    m = kwargs["microbatches"]  # forwards of the first layer in the last step: m, or 2m when
    out = {"forwards": [calls[0], 2 * m if kwargs.get("activation_checkpointing") else m],
           "case": index, "rank": dist.get_rank(), "stage": pipe.stage,  # recomputed
           "loss": P.relative(losses, ref_losses), "held": held, "freed": freed}
    if kwargs.get("data_parallel") != "sharded":
        mine = [p.detach() for c in pipe.chunks for p in
                (c.module if hasattr(c, "reducer") else c).parameters()]
        theirs = [p for a, b in pipe.layer_ranges for i in range(a, b) for p in ref_params[i]]
        out["params"] = P.relative(mine, theirs) if len(mine) == len(theirs) else 1.0
        out["expected_held"] = sum(p.numel() for p in theirs)
    x, _ = M.batch(name, 99, 0, per)
    out["evaluate"] = P.relative(pipe.evaluate(x), ref_model(x).detach())
    actions = pipe.schedule.actions(pipe.stage)
    out["exchanges"] = [pipe.counters["exchanges"], P.communication_batches(actions)]
    # The last step's calls into Python: one per forward, and one per backward only with DDP.
    c, kinds = pipe.counters, [a[0] for a in actions]
    out["python_calls"] = [c["python_calls"], kinds.count("F") + (
        kinds.count("B") if pipe.data_parallel == "ddp" else 0),
        0 < c["forward_seconds"] <= c["busy_seconds"]]
    sim = __import__("heft.torch._c10d", fromlist=["x"]).parallel.pipeline.simulate(pipe.schedule)
    out["in_flight"] = [pipe.counters["max_in_flight"], sim["max_in_flight"][pipe.stage],
                        kwargs.get("active_microbatches")]
    if data > 1:  # per step: the loss's average and, with DDP, one allreduce per chunk
        out["data_ops"] = [data_ops[-1], len(pipe.chunks) + 1, pipe.data_parallel]
    if index == 0:
        out["schedule"] = pipe.print_schedule()
    return out


def errors(meshes):
    """The refusals, each naming its argument: [(what, message or None)]."""
    import torch
    from heft.torch.parallel import DeviceMesh, Pipeline
    import pp_models as P
    import sharded_models as M
    mesh = meshes['{"pipeline": 2}']
    found = []

    def attempt(what, f):
        try:
            f()
            found.append((what, None))
        except (ValueError, TypeError) as e:
            found.append((what, str(e)))

    attempt("world", lambda: DeviceMesh(pipeline=3))
    attempt("layers", lambda: Pipeline(torch.nn.Sequential(torch.nn.Linear(2, 2)), mesh,
                                       microbatches=2, partition=[]))
    attempt("virtual", lambda: Pipeline(P.cnn(), mesh, microbatches=2, schedule="interleaved",
                                        virtual_stages=8, partition=[1]))
    attempt("boundaries", lambda: Pipeline(P.cnn(), mesh, microbatches=2, partition=[3, 5]))
    attempt("example", lambda: Pipeline(P.cnn(), mesh, microbatches=2))
    pipe = Pipeline(P.cnn(), mesh, microbatches=3, partition=[5])
    x, y = M.batch("cnn", 0, 0, BATCH)
    attempt("divide", lambda: pipe.step(x, y, P.loss_fn("cnn")))

    def failing_loss(out, y):
        raise ValueError("the loss_fn failed here")
    one = Pipeline(P.cnn(), DeviceMesh(pipeline=1), microbatches=2, partition=[])
    attempt("callback", lambda: one.step(x, y, failing_loss))  # raised through run_stage
    return found


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    dist.init_process_group("heft", init_method="env://")
    cases = TWO if dist.get_world_size() == 2 else FOUR
    meshes, refs = {}, {}
    for i, (name, mesh_args, kwargs) in enumerate(cases):
        print("result " + json.dumps(run_case(i, name, mesh_args, kwargs, meshes, refs)),
              flush=True)
    if dist.get_world_size() == 2:
        print("errors " + json.dumps(errors(meshes)), flush=True)
    dist.destroy_process_group()


def dying_worker():
    """4 stages; world rank 3 (the last stage) exits in its loss at step 1, micro-batch 2; the
    others print `lost <seconds> <message>` for the error their step raised."""
    import time
    import torch.distributed as dist
    import heft.torch  # noqa: F401
    from heft.torch.parallel import DeviceMesh, Pipeline
    import pp_models as P
    import sharded_models as M
    dist.init_process_group("heft", init_method="env://", timeout=__import__("datetime")
                            .timedelta(seconds=60))
    rank = dist.get_rank()
    pipe = Pipeline(P.gpt(), DeviceMesh(pipeline=4), microbatches=4, schedule="interleaved",
                    partition=[2, 4, 6])
    calls = [0]

    def loss(out, y):
        calls[0] += 1
        if calls[0] == 4 + 3:
            os._exit(3)
        return P.loss_fn("gpt")(out, y)

    for step in range(3):
        x, y = M.batch("gpt", step, 0, BATCH)
        t0 = time.monotonic()
        try:
            pipe.step(x, y, loss)
        except RuntimeError as e:
            print(f"lost {time.monotonic() - t0:.2f} {e}".replace("\n", " "), flush=True)
            os._exit(0)
    print(f"rank {rank}: no error", flush=True)


def parse(testcase, results, prefix):
    text = support.describe(results)
    for rc, _, _ in results:
        testcase.assertEqual(rc, 0, text)
    return [json.loads(l[len(prefix):]) for _, out, _ in results for l in out.splitlines()
            if l.startswith(prefix)], text


class PipelineEquivalence(unittest.TestCase):
    def check(self, world, cases):
        results = support.run_ranks(world, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=240, env_of_rank=lambda r: {"HEFT_PP_WORKER": "1"})
        rows, text = parse(self, results, "result ")
        self.assertEqual(len(rows), world * len(cases), text)
        for r in rows:
            what = f"{cases[r['case']]} rank {r['rank']}: {r}"
            self.assertLessEqual(r["loss"], TOLERANCE, what)
            self.assertLessEqual(r["evaluate"], TOLERANCE, what)
            if "params" in r:
                self.assertLessEqual(r["params"], TOLERANCE, what)
                self.assertEqual(r["held"], r["expected_held"], what)  # only its stage's
            self.assertTrue(r["freed"], what)
            if "params" in r:  # (ShardedDataParallel recomputes in its own way)
                self.assertEqual(r["forwards"][0], r["forwards"][1], what)
            if r.get("data_ops", [0, 0, None])[2] == "ddp":  # synchronised once per step
                self.assertEqual(r["data_ops"][0], r["data_ops"][1], what)
            if "schedule" in r:
                self.assertIn("bubble", r["schedule"], what)
                self.assertIn("theory", r["schedule"], what)
            self.assertEqual(r["exchanges"][0], r["exchanges"][1], what)
            self.assertGreater(r["exchanges"][0], 0, what)
            self.assertEqual(r["python_calls"][0], r["python_calls"][1], what)
            self.assertTrue(r["python_calls"][2], what)  # 0 < forward_seconds <= busy_seconds
            ran, simulated, active = r["in_flight"]
            self.assertEqual(ran, simulated, what)
            if active is not None:
                self.assertLessEqual(ran, active, what)
        return results, text

    def test_two_stages(self):
        results, text = self.check(2, TWO)
        self.assertIn("Pipeline: partition (auto: profiled on rank 0", results[0][1], text)
        found = dict(parse(self, results, "errors ")[0][0])
        print(json.dumps(found, indent=1))
        for what, needle in (("world", "pipeline"), ("layers", "stages_or_sequential"),
                             ("virtual", "virtual_stages"), ("boundaries", "partition"),
                             ("example", "example_input"), ("divide", "microbatches=3"),
                             ("callback", "the loss_fn failed here")):
            self.assertIn(needle, found[what] or "", f"{what}: {found[what]}\n{text}")

    def test_four_ranks_stages_data_and_sharded(self):
        self.check(4, FOUR)

    def test_a_stage_that_dies_mid_step(self):
        results = support.run_ranks(4, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=120, env_of_rank=lambda r: {"HEFT_PP_WORKER": "die"})
        text = support.describe(results)
        self.assertEqual(results[3][0], 3, text)
        for rank, (rc, out, _) in enumerate(results[:3]):
            self.assertEqual(rc, 0, text)
            lost = [l for l in out.splitlines() if l.startswith("lost ")]
            self.assertEqual(len(lost), 1, text)
            seconds = float(lost[0].split()[1])
            self.assertLess(seconds, 30, text)  # far within the 60 s timeout
            # Every survivor names the rank that died, the neighbour and the ranks further
            # away alike: the communicator's first record of the loss wins (abort_record_test).
            names = ["stage 3 (world rank 3)"]
            self.assertTrue(any(n + " was lost" in lost[0] for n in names), text)


if __name__ == "__main__":
    if os.environ.get("HEFT_PP_WORKER"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        dying_worker() if os.environ["HEFT_PP_WORKER"] == "die" else worker()
    else:
        unittest.main(verbosity=2)
