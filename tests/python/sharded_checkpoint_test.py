# ctest-labels: multiproc
"""heft.torch.parallel.save_checkpoint / load_checkpoint / load_full_state_dict: a GPT
trained 10 AdamW steps at 4 ranks is saved (heft's multi-writer format: one part per rank,
committed by rank 0) and trains 10 more; loaded at 2 ranks, at 4 ranks hybrid 2 x 2 and in
one process without a process group, the next 10 losses equal the uninterrupted run's
(relative 1e-5); load_full_state_dict gives a plain model the saved parameters exactly; a
model the checkpoint does not fit is refused naming a missing parameter.
The directory is written and checked by the C++ CheckpointDirectory
through the extension (heft.torch._c10d.checkpoint): its version-2 manifest is on disk, a
bad file name raises ValueError, and a corrupted unit file makes the C++ reader skip the
checkpoint with its warning naming the file.
This file is also the worker (HEFT_SDP_PHASE=save|load)."""
import json
import os
import sys
import tempfile

import support

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, GLOBAL_BATCH, LR, TOL = 10, 12, 3e-3, 1e-5


def train(model, opt, first, world, rank):
    import torch.distributed as dist
    import sharded_models as M
    per = GLOBAL_BATCH // world
    losses = []
    for step in range(first, first + STEPS):
        x, y = M.batch("gpt", step, rank * per, (rank + 1) * per)
        loss = M.loss_of("gpt", model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().reshape(1).clone()
        if world > 1:
            dist.all_reduce(t)
        losses.append(t.item() / world)
    return losses


def wrapped(degree=None):
    import torch
    import sharded_models as M
    from heft.torch.parallel import ShardedDataParallel
    model = ShardedDataParallel(M.make("gpt"), sharded_degree=degree, units=[M.Block])
    return model, torch.optim.AdamW(model.parameters(), lr=LR)


def phase(name, directory, degree):
    """save: 10 steps, save, 10 more (prints them); load: load, 10 steps (prints them)."""
    import torch
    import torch.distributed as dist
    from heft.torch import parallel
    on = "RANK" in os.environ
    if on:
        import heft.torch  # noqa: F401
        dist.init_process_group("heft", init_method="env://")
    world, rank = (dist.get_world_size(), dist.get_rank()) if on else (1, 0)
    model, opt = wrapped(degree)
    if name == "save":
        train(model, opt, 0, world, rank)
        step = parallel.save_checkpoint(directory, model, opt, meta={"steps": STEPS})
        full = model.full_state_dict()
        if rank == 0:
            torch.save(full, os.path.join(directory, "expected.pt"))
    else:
        step, meta = parallel.load_checkpoint(directory, model, opt)
        assert meta == {"steps": STEPS}, meta
    losses = train(model, opt, STEPS, world, rank)
    if on:
        dist.destroy_process_group()
    return step, losses


class Checkpoints:
    def launch(self, world, directory, name, degree=0):
        results = support.run_ranks(world, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=180, env_of_rank=lambda r: {
                                        "HEFT_SDP_PHASE": name, "HEFT_SDP_DIR": directory,
                                        "HEFT_SDP_DEGREE": str(degree)})
        for rc, _, _ in results:
            self.assertEqual(rc, 0, support.describe(results))
        line = [l for l in results[0][1].splitlines() if l.startswith("losses ")][0]
        return json.loads(line[7:])

    def close(self, a, b):
        self.assertEqual(len(a), len(b))
        for x, y in zip(a, b):
            self.assertLessEqual(abs(x - y) / abs(y), TOL, (a, b))

    def test_save_at_4_load_at_2_hybrid_and_1(self):
        import torch
        import sharded_models as M
        from heft.torch import parallel
        with tempfile.TemporaryDirectory() as d:
            step, ref = self.launch(4, d, "save")
            self.assertEqual(step, 1)
            self.assertTrue(os.path.isfile(os.path.join(d, "ckpt-000000000001", "manifest.json")))
            self.assertEqual(sorted(os.listdir(os.path.join(d, "ckpt-000000000001"))),
                             ["manifest.json"] + [f"part-0000{k}" for k in range(4)])
            print("uninterrupted, steps 11-20:", ref)
            for world, degree in ((2, 0), (4, 2)):
                loaded_step, losses = self.launch(world, d, "load", degree)
                print(f"loaded at {world} ranks (degree {degree or world}):", losses)
                self.assertEqual(loaded_step, 1)
                self.close(losses, ref)
            _, losses = phase("load", d, None)  # this process, no process group
            print("loaded in one process:", losses)
            self.close(losses, ref)
            other = parallel.ShardedDataParallel(M.make("cnn"))
            with self.assertRaises(KeyError) as ctx:  # another model: refused, naming what
                parallel.load_checkpoint(d, other)
            self.assertIn("the checkpoint has no parameter conv1.weight", str(ctx.exception))
            full, expected = parallel.load_full_state_dict(d), torch.load(os.path.join(d, "expected.pt"))
            plain = M.make("gpt")
            plain.load_state_dict(full)
            self.assertEqual(list(full), list(plain.state_dict()))
            for k, v in expected.items():
                self.assertTrue(torch.equal(full[k], v), k)
            self.format_is_the_cpp_ones(d)

    def format_is_the_cpp_ones(self, d):
        import contextlib
        import io
        from heft.torch import _c10d, parallel
        from heft.torch.parallel import checkpoint_dir as _checkpoint_dir
        self.assertIs(_checkpoint_dir._cc, _c10d.checkpoint)
        with open(os.path.join(d, "ckpt-000000000001", "manifest.json")) as f:
            self.assertEqual(json.load(f), {"format": "heft-checkpoint", "version": 2, "step": 1,
                                            "meta": {"steps": STEPS}, "parts": 4})
        with self.assertRaises(ValueError) as ctx:
            _checkpoint_dir.save_part(d, 5, 0, {"a/b": b"x"})
        self.assertIn("expected a plain name, found 'a/b'", str(ctx.exception))
        unit = os.path.join(d, "ckpt-000000000001", "part-00002", "unit-00001.pt")
        with open(unit, "r+b") as f:  # one byte changed, same size: only the CRC sees it
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xFF]))
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(FileNotFoundError):
            parallel.load_full_state_dict(d)
        self.assertIn("part-00002/unit-00001.pt is missing or does not match its size or crc32",
                      err.getvalue())


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.path.append(os.path.join(support.BINARY_DIR, "python"))
    if os.environ.get("HEFT_SDP_PHASE"):
        degree = int(os.environ["HEFT_SDP_DEGREE"]) or None
        step, losses = phase(os.environ["HEFT_SDP_PHASE"], os.environ["HEFT_SDP_DIR"], degree)
        if os.environ.get("RANK", "0") == "0":
            print("losses " + json.dumps([step, losses]), flush=True)
        sys.exit(0)
    import unittest

    class ShardedCheckpoint(Checkpoints, unittest.TestCase):
        pass

    support.main_guard()
    unittest.main(verbosity=2)
