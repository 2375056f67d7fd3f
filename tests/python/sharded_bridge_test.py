# ctest-labels: multiproc
"""One sharded checkpoint for heft-train and heft.torch: heft-train's GPT trained sharded 4
ways for 4 steps is checkpointed; heft.torch's ShardedDataParallel of the same model in
PyTorch (heft_train_gpt.py, the same parameter names) at 2 ranks loads it, trains steps 5..8
on heft-train's own batches (heft.torch.data.TextWindows) and saves; heft-train sharded 4
ways resumes that checkpoint and trains steps 9..12. Every loss on the way equals the
uninterrupted heft-train run's (relative 1e-5): step 8's (Python, against heft-train's
checkpoint at step 8), steps 5..8 as heft-train prints them (4 decimals), and step 12's
(heft-train after the round trip). heft-train's parameters at step 4 equal what Python
loaded, exactly. AdamW without weight decay: heft-train decays matrices only, and the Python
strategy keeps one group per unit (docs/sharded.md).
This file is also the Python worker (HEFT_BRIDGE_FROM, HEFT_BRIDGE_TO)."""
import glob
import json
import os
import re
import shutil
import sys
import tempfile
import unittest

import support

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = {"n_layer": 2, "n_head": 4, "n_embd": 32, "block_size": 16}
BATCH, LR, SEED, TOL = 8, 3e-3, 7, 1e-5


def heft_train(ranks, max_steps, ckpt):
    """heft run -n ranks heft-train, sharded over every rank, checkpointing into ckpt at
    its last step; the CompletedProcess."""
    args = ["-n", str(ranks), "--", os.path.join(support.BINARY_DIR, "heft-train"),
            "--model", "gpt", "--lr", str(LR), "--lr_schedule", "constant",
            "--warmup_steps", "0", "--weight_decay", "0", "--seed", str(SEED), "--eval", "false",
            "--log_every", "1", "--batch_size", str(BATCH),
            "--sharded_data_parallel_degree", str(ranks), "--max_steps", str(max_steps),
            "--checkpoint_dir", ckpt, "--checkpoint_keep", "10"]
    for k, v in MODEL.items():
        args += ["--" + k, str(v)]
    env = support.clean_env()
    for k in ("HEFT_STORE", "SM_CHECKPOINT_DIR", "HEFT_CHECKPOINT"):
        env.pop(k, None)
    return support.heft_run(args, timeout=300, env=env)


def manifest(ckpt, step):
    with open(os.path.join(ckpt, f"ckpt-{step:012d}", "manifest.json")) as f:
        return json.load(f)


def printed_losses(text):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"\] step=(\d+) epoch=\d+ loss=([0-9.]+)", text)}


def worker(src, dst):
    """2 ranks: load heft-train's checkpoint, steps 5..8, save; prints `result {json}`."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    import heft.torch  # noqa: F401
    from heft.torch import parallel
    from heft.torch.data import TextWindows
    import heft_train_gpt as G
    dist.init_process_group("heft", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)  # other initial values than heft-train's: the load must set them
    model = parallel.ShardedDataParallel(G.GPT(**MODEL), units=[G.Block])
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    step, meta = parallel.load_checkpoint(src, model, opt)
    loaded = {k: v.double().sum().item() for k, v in model.full_state_dict().items()}
    data = TextWindows(block_size=MODEL["block_size"], batch_size=BATCH, seed=SEED)
    losses = {}
    for s in range(step + 1, step + 5):
        x, y = data.batch(s - 1, epoch=meta["epoch"] - 1, rank=rank, ranks=world)
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        model.clip_grad_norm_(1.0)
        opt.step()
        t = loss.detach().reshape(1).clone()
        dist.all_reduce(t)
        losses[s] = t.item() / world
    last = step + 4
    parallel.save_checkpoint(dst, model, opt, step=last,
                             meta={"step": last, "epoch": meta["epoch"], "next_batch": last,
                                   "loss": losses[last]})
    if rank == 0:
        print("result " + json.dumps({"step": step, "meta": meta, "losses": losses,
                                      "loaded": loaded}), flush=True)
    dist.destroy_process_group()


class ShardedBridge(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/usr/share/games/fortunes/fortunes"):
            self.skipTest("the Debian package fortunes is not installed")
        self.tmp = tempfile.mkdtemp(prefix="heft-bridge-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_heft_train_to_python_and_back(self):
        whole = os.path.join(self.tmp, "whole")
        run = heft_train(4, 12, whole)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        want = printed_losses(run.stdout + run.stderr)
        # heft-train keeps a checkpoint at every step it was asked to stop at: 4, 8, 12.
        first = os.path.join(self.tmp, "first")
        run4 = heft_train(4, 4, first)
        self.assertEqual(run4.returncode, 0, run4.stdout + run4.stderr)
        run8 = heft_train(4, 8, os.path.join(self.tmp, "whole8"))
        self.assertEqual(run8.returncode, 0, run8.stdout + run8.stderr)
        loss8 = manifest(os.path.join(self.tmp, "whole8"), 8)["meta"]["loss"]
        loss12 = manifest(whole, 12)["meta"]["loss"]
        layout = json.load(open(glob.glob(os.path.join(first, "ckpt-*", "part-00003",
                                                       "layout.json"))[0]))
        self.assertEqual((layout["format"], layout["version"], layout["shard_size"]),
                         ("heft-sharded", 2, 4))

        # Python, 2 ranks: load, 4 steps, save.
        back = os.path.join(self.tmp, "back")
        results = support.run_ranks(2, [support.PYTHON, "-u", os.path.abspath(__file__)], 300,
                                    lambda r: {"HEFT_BRIDGE_FROM": first, "HEFT_BRIDGE_TO": back})
        text = support.describe(results)
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        row = json.loads(next(l for l in results[0][1].splitlines()
                              if l.startswith("result "))[len("result "):])
        self.assertEqual(row["step"], 4, text)
        losses = {int(k): v for k, v in row["losses"].items()}
        for s in range(5, 9):  # heft-train prints 4 decimals
            self.assertAlmostEqual(losses[s], want[s], delta=6e-5, msg=f"step {s}: {text}")
        self.assertLess(abs(losses[8] - loss8), TOL * abs(loss8), (losses[8], loss8))
        # What Python loaded is heft-train's step-4 state: the sums of a plain state dict.
        from heft.torch import parallel
        saved = parallel.load_full_state_dict(first)
        self.assertEqual(set(saved), set(row["loaded"]))
        for k, v in saved.items():
            self.assertEqual(v.double().sum().item(), row["loaded"][k], k)

        # heft-train resumes Python's checkpoint: steps 9..12.
        run = heft_train(4, 12, back)
        out = run.stdout + run.stderr
        self.assertEqual(run.returncode, 0, out)
        self.assertIn("resumed: step=8", out)
        self.assertIn("has no rng.pt", out)
        got = printed_losses(out)
        self.assertEqual(sorted(got), [9, 10, 11, 12], out)
        for s in range(9, 13):
            self.assertAlmostEqual(got[s], want[s], delta=6e-5, msg=f"step {s}: {out}")
        resumed12 = manifest(back, 12)["meta"]["loss"]
        self.assertLess(abs(resumed12 - loss12), TOL * abs(loss12), (resumed12, loss12))
        print(f"step 8: python {losses[8]!r} heft-train {loss8!r} "
              f"(relative {abs(losses[8] - loss8) / abs(loss8):.1e}); step 12 after the round "
              f"trip {resumed12!r}, uninterrupted {loss12!r} "
              f"(relative {abs(resumed12 - loss12) / abs(loss12):.1e})", file=sys.stderr)


class LegacyParts(unittest.TestCase):
    """A checkpoint heft.torch wrote before the one format (layout.json without "format",
    unit files of torch.save dictionaries) still loads, values and AdamW state exact."""

    def test_old_python_checkpoint_loads(self):
        import io
        import torch
        from heft.torch import parallel
        from heft.torch.parallel import checkpoint_dir as ckdir
        import heft_train_gpt as G
        torch.manual_seed(0)
        model = parallel.ShardedDataParallel(G.GPT(**MODEL), units=[G.Block])
        opt = torch.optim.AdamW(model.parameters(), lr=LR)
        x = torch.randint(0, 256, (2, MODEL["block_size"]))
        model(x).square().mean().backward()
        opt.step()

        def saved(obj):
            buf = io.BytesIO()
            torch.save(obj, buf)
            return buf.getvalue()
        units = []
        files = {}
        for i, u in enumerate(model.units):
            members, off = [], 0
            for like, places in zip(u.likes[:-1], u.slots):
                members.append({"names": [s.name for s in places], "shape": list(like.shape),
                                "offset": off, "numel": like.numel()})
                off += like.numel()
            units.append({"name": u.name, "numel": u.numel, "shard_numel": u.shard_numel,
                          "members": members})
            files[f"unit-{i:05d}.pt"] = saved({"shard": u.shard.detach(),
                                               "optimizer": dict(opt.state[u.shard])})
        files["layout.json"] = json.dumps({"shard_rank": 0, "shard_size": 1, "replica": 0,
                                           "units": units,
                                           "state_keys": model._state_keys}).encode()
        files["replicated.pt"] = saved({"buffers": {}, "param_groups": [
            {k: v for k, v in opt.param_groups[0].items() if k != "params"}]})
        d = tempfile.mkdtemp(prefix="heft-legacy-")
        try:
            ckdir.save_part(d, 3, 0, files)
            ckdir.commit(d, 3, 1, {"epoch": 1}, 2)
            torch.manual_seed(1)
            other = parallel.ShardedDataParallel(G.GPT(**MODEL), units=[G.Block])
            other_opt = torch.optim.AdamW(other.parameters(), lr=1.0)
            self.assertEqual(parallel.load_checkpoint(d, other, other_opt), (3, {"epoch": 1}))
            for k, v in model.full_state_dict().items():
                self.assertTrue(torch.equal(other.full_state_dict()[k], v), k)
            self.assertEqual(other_opt.param_groups[0]["lr"], LR)
            for mine, theirs in zip(other.parameters(), model.parameters()):
                for key, value in opt.state[theirs].items():
                    self.assertTrue(torch.equal(other_opt.state[mine][key], value), key)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    sys.path.append(os.path.join(support.BINARY_DIR, "python"))
    if os.environ.get("HEFT_BRIDGE_FROM"):
        worker(os.environ["HEFT_BRIDGE_FROM"], os.environ["HEFT_BRIDGE_TO"])
        sys.exit(0)
    support.main_guard()
    unittest.main(verbosity=2)
