# ctest-labels: multiproc
"""A checkpoint part is data, never a program: every heft.torch loader reads tensors and
plain data only (torch.load with weights_only=True, said explicitly). For each loader
(parallel.load_checkpoint and load_full_state_dict of ShardedDataParallel, Pipeline's
load_checkpoint and load_full_state_dict) a real checkpoint is saved, then one part file is
replaced by a crafted one that creates MARKER when unpickled (a __reduce__ running
`touch MARKER` torch.save'd and as raw pickle bytes; a TorchScript archive whose
__setstate__ opens it) with its size and CRC-32 rewritten in part.json, so that the C++ reader
verifies it and only the unpickling policy stands between it and the command. The load
raises ValueError naming the file, and MARKER does not exist, also with
TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 (which turns off torch's weights-only default, not an
explicit weights_only=True). The crafted files bite: torch.load without weights_only under
that variable runs them. A normal save and load round trip gives equal values.
This file is also the Pipeline worker (HEFT_SAFETY_WORKER=pipeline)."""
import contextlib
import json
import os
import pickle
import shutil
import sys
import tempfile
import unittest
import zlib
from unittest import mock

import support

HERE = os.path.dirname(os.path.abspath(__file__))
REFUSAL = "holds something other than tensors and plain data"
NO_WEIGHTS_ONLY = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}


class Probe:
    """What a crafted part pickles: unpickling it runs `touch marker`."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


KINDS = ("torch.save", "raw pickle", "TorchScript")


def scripted_probe(marker):
    """A TorchScript module whose __setstate__, run when torch.jit.load unpickles it,
    creates marker (torch.from_file with shared=True opens the path O_CREAT)."""
    import torch
    from typing import Tuple

    class ScriptProbe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", torch.zeros(4, dtype=torch.uint8))
            self.path = marker

        def forward(self, x):
            return x

        @torch.jit.export
        def __getstate__(self) -> Tuple[str, bool]:
            return (self.path, self.training)

        @torch.jit.export
        def __setstate__(self, state: Tuple[str, bool]) -> None:
            self.path = state[0]
            self.training = state[1]
            self.seen = torch.from_file(self.path, True, 4, dtype=torch.uint8)

    return torch.jit.script(ScriptProbe())


def crafted(kind, marker):
    """The bytes of a crafted part: torch.save of a dict holding a Probe, a raw pickle, or
    a TorchScript archive (torch.load dispatches those to torch.jit.load)."""
    import io
    import torch
    if kind == "raw pickle":
        return pickle.dumps({"shard": Probe(marker)}, protocol=2)
    if kind == "TorchScript":
        buf = io.BytesIO()
        torch.jit.save(scripted_probe(marker), buf)
        return buf.getvalue()
    buf = io.BytesIO()
    torch.save({"shard": Probe(marker), "tensor": torch.zeros(2)}, buf)
    return buf.getvalue()


def replace_part_file(directory, part, name, data):
    """Replaces file `name` of part `part` of the newest checkpoint in directory by data,
    with its size and crc32 in part.json rewritten (the C++ reader then verifies it).
    Returns the file's path."""
    step = sorted(n for n in os.listdir(directory) if n.startswith("ckpt-"))[-1]
    where = os.path.join(directory, step, f"part-{part:05d}")
    with open(os.path.join(where, name), "wb") as f:
        f.write(data)
    with open(os.path.join(where, "part.json")) as f:
        listing = json.load(f)
    entry = [e for e in listing["files"] if e["name"] == name][0]
    entry["size"], entry["crc32"] = len(data), zlib.crc32(data)
    with open(os.path.join(where, "part.json"), "w") as f:
        json.dump(listing, f)
    return os.path.join(where, name)


def attempt(load, marker, env=None):
    """(the refusal's message or None if it loaded, whether marker exists) of load()."""
    with mock.patch.dict(os.environ, env or {}):
        try:
            load()
            message = None
        except ValueError as e:
            message = str(e)
    return message, os.path.exists(marker)


def sums(state):
    """{key: the exact float64 sum, as hex}: equal only for equal tensors (here)."""
    return {k: v.double().sum().item().hex() for k, v in state.items()}


# ---- the Pipeline worker: 2 ranks, pipeline 2 --------------------------------------------
def layers(seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8),
                               torch.nn.ReLU(), torch.nn.Linear(8, 2))


def pipeline_worker(directory, marker):
    """Saves after one AdamW step, loads into a fresh pipeline (round trip), then loads
    again after rank 0 replaced part 1's state.pt by a crafted one."""
    import torch
    import torch.distributed as dist
    import heft.torch  # noqa: F401
    from heft.torch.parallel import DeviceMesh, Pipeline
    dist.init_process_group("heft", init_method="env://")
    rank = dist.get_rank()

    def make(seed):
        pipe = Pipeline(layers(seed), DeviceMesh(pipeline=2), microbatches=2, partition=[2])
        return pipe, torch.optim.AdamW(pipe.parameters(), lr=1e-2)

    def state(pipe):
        return sums({k: v for c in pipe.chunks for k, v in c.state_dict().items()})

    pipe, opt = make(0)
    torch.manual_seed(1)
    x, y = torch.randn(4, 6), torch.randn(4, 2)
    opt.zero_grad()
    pipe.step(x, y, torch.nn.functional.mse_loss)
    opt.step()
    pipe.save_checkpoint(directory, opt)
    pipe.save_checkpoint(os.path.join(directory, "clean"), opt)  # left as saved
    fresh, fresh_opt = make(2)
    before = state(fresh)
    fresh.load_checkpoint(directory, fresh_opt)
    moments = [sums({"m": s["exp_avg"]})["m"] for s in fresh_opt.state.values()]
    out = {"saved": state(pipe), "before": before, "loaded": state(fresh),
           "moments": moments, "saved_moments": [sums({"m": s["exp_avg"]})["m"]
                                                 for s in opt.state.values()],
           "betas": list(fresh_opt.param_groups[0]["betas"])}
    dist.barrier()
    if rank == 0:
        out["path"] = replace_part_file(directory, 1, "state.pt", crafted("torch.save", marker))
    dist.barrier()
    out["refused"] = attempt(lambda: fresh.load_checkpoint(directory, fresh_opt), marker)
    out["refused_env"] = attempt(lambda: fresh.load_checkpoint(directory, fresh_opt), marker,
                                 NO_WEIGHTS_ONLY)
    print("result " + json.dumps(out), flush=True)
    dist.destroy_process_group()


class CheckpointSafety(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="heft-ckpt-safety-")
        self.marker = os.path.join(self.tmp, "MARKER")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def copy(self, directory, name):
        return shutil.copytree(directory, os.path.join(self.tmp, name))

    def assert_refused(self, result, path):
        message, marker_exists = result
        self.assertIsNotNone(message, f"{path}: loaded")
        self.assertIn(f": {path}: {REFUSAL}", message)
        self.assertIn("heft refuses to unpickle it", message)
        self.assertFalse(marker_exists, f"{path}: the crafted part ran its command")

    def test_the_crafted_parts_bite_without_weights_only(self):
        import torch
        path = os.path.join(self.tmp, "part.pt")
        for kind in KINDS:
            with open(path, "wb") as f:
                f.write(crafted(kind, self.marker))
            with mock.patch.dict(os.environ, NO_WEIGHTS_ONLY), \
                    contextlib.suppress(Exception), \
                    self.assertWarns(UserWarning):  # torch's "forcing weights_only=False"
                torch.load(path)
            self.assertTrue(os.path.exists(self.marker), kind)
            os.remove(self.marker)

    def test_sharded_round_trip_and_crafted_parts(self):
        import torch
        from heft.torch import parallel
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                                  torch.nn.ReLU(), torch.nn.Linear(8, 2))
        model = parallel.ShardedDataParallel(net)  # no process group: one process
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(5, 6)).square().mean().backward()
        opt.step()
        saved = os.path.join(self.tmp, "saved")
        parallel.save_checkpoint(saved, model, opt, meta={"epoch": 3})
        # The round trip: a fresh model and optimizer take every value.
        torch.manual_seed(1)
        other = parallel.ShardedDataParallel(torch.nn.Sequential(
            torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
            torch.nn.Linear(8, 2)))
        other_opt = torch.optim.AdamW(other.parameters(), lr=5e-1)
        self.assertEqual(parallel.load_checkpoint(saved, other, other_opt), (1, {"epoch": 3}))
        self.assertEqual(sums(other.full_state_dict()), sums(model.full_state_dict()))
        self.assertEqual(other_opt.param_groups[0]["lr"], 1e-2)
        self.assertEqual(other_opt.param_groups[0]["betas"], opt.param_groups[0]["betas"])
        for mine, theirs in zip(other.parameters(), model.parameters()):
            want = opt.state.get(theirs, {})
            for key, value in want.items():
                self.assertTrue(torch.equal(other_opt.state[mine][key], value), key)
        self.assertGreater(sum(len(v) for v in other_opt.state.values()), 0)
        self.assertEqual(sums(parallel.load_full_state_dict(saved)),
                         sums(model.full_state_dict()))
        # One part file crafted, each loader, each kind, with and without the variable.
        loaders = {"load_checkpoint": lambda d: parallel.load_checkpoint(d, other, other_opt),
                   "load_full_state_dict": parallel.load_full_state_dict}
        n = 0
        for name in ("unit-00000.pt", "replicated.pt"):
            for kind in KINDS:
                n += 1
                d = self.copy(saved, f"crafted-{n}")
                path = replace_part_file(d, 0, name, crafted(kind, self.marker))
                for who, load in loaders.items():
                    for env in ({}, NO_WEIGHTS_ONLY):
                        with self.subTest(file=name, kind=kind, loader=who, env=env):
                            result = attempt(lambda: load(d), self.marker, env)
                            self.assert_refused(result, path)
                            self.assertTrue(result[0].startswith(who + ": "), result[0])

    def test_pipeline_round_trip_and_crafted_parts(self):
        from heft.torch.parallel import Pipeline
        saved = os.path.join(self.tmp, "saved")
        command = [support.PYTHON, "-u", os.path.abspath(__file__)]
        env = {"HEFT_SAFETY_WORKER": "pipeline", "HEFT_SAFETY_DIR": saved,
               "HEFT_SAFETY_MARKER": self.marker}
        results = support.run_ranks(2, command, 180, lambda r: env)
        text = support.describe(results)
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        rows = [json.loads(l[len("result "):]) for _, out, _ in results
                for l in out.splitlines() if l.startswith("result ")]
        self.assertEqual(len(rows), 2, text)
        path = rows[0]["path"]
        for r in rows:  # Pipeline.load_checkpoint on each rank
            self.assertEqual(r["loaded"], r["saved"], text)
            self.assertNotEqual(r["before"], r["saved"], text)
            self.assertEqual(r["moments"], r["saved_moments"], text)
            self.assertEqual(r["betas"], [0.9, 0.999], text)
            self.assert_refused(r["refused"], path)
            self.assertTrue(r["refused"][0].startswith("Pipeline.load_checkpoint: "))
            self.assert_refused(r["refused_env"], path)
        # load_full_state_dict, in this process (no process group): the crafted state.pt;
        # the clean copy (the round trip, the whole model), then its param_groups.pt crafted.
        for env in ({}, NO_WEIGHTS_ONLY):
            self.assert_refused(attempt(lambda: Pipeline.load_full_state_dict(saved),
                                        self.marker, env), path)
        clean = os.path.join(saved, "clean")
        state = Pipeline.load_full_state_dict(clean)
        self.assertEqual(sums(state), {**rows[0]["saved"], **rows[1]["saved"]})
        groups = replace_part_file(clean, 0, "param_groups.pt",
                                   crafted("raw pickle", self.marker))
        for env in ({}, NO_WEIGHTS_ONLY):
            result = attempt(lambda: Pipeline.load_full_state_dict(clean), self.marker, env)
            self.assert_refused(result, groups)
            self.assertTrue(result[0].startswith("Pipeline.load_full_state_dict: "))


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.path.append(os.path.join(support.BINARY_DIR, "python"))
    if os.environ.get("HEFT_SAFETY_WORKER") == "pipeline":
        pipeline_worker(os.environ["HEFT_SAFETY_DIR"], os.environ["HEFT_SAFETY_MARKER"])
        sys.exit(0)
    support.main_guard()
    unittest.main(verbosity=2)
