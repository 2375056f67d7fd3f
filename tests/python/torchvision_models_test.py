# ctest-labels: multiproc
"""heft.torch.parallel on models nobody on this team wrote: torchvision's (Debian's
python3-torchvision 0.14). One spawn of 2 real ranks on the heft backend; every case trains a
few steps on the same global batch as one process running the unwrapped model and must equal
it within a stated tolerance (the largest difference is printed):

- ShardedDataParallel over resnet18(num_classes=10), 2 ranks x 2 images of 3x32x32, 3 SGD
  (momentum) steps: with its BatchNorm in eval mode (batch statistics differ by construction
  under data parallelism: each rank normalises by its own images, as under torch's DDP), and
  with GroupNorm (norm_layer=, per sample) in train mode; and over torchvision's
  VisionTransformer with units=[nn.Linear] (an nn.MultiheadAttention's out_proj, whose
  weight the attention reads without calling it, must not become a unit). The full
  state_dict (parameters and the BatchNorm buffers), a checkpoint's load_full_state_dict and
  a load_checkpoint into a fresh wrapper equal the one-process model.

This file is also the worker (HEFT_TV_WORKER=1; rank 0 prints `case ` JSON lines)."""
import json
import os
import sys
import tempfile
import unittest

import support

CLASSES, IMAGE = 10, 32
SDP_TOL = 1e-5   # relative, losses and per tensor (norm of the difference over the norm)
VIT = dict(image_size=IMAGE, patch_size=8, num_layers=4, num_heads=4, hidden_dim=64,
           mlp_dim=128, num_classes=CLASSES)


def batch(step, lo, hi, total):
    """Images and labels lo..hi of a global batch of `total` that depends only on step."""
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(total, 3, IMAGE, IMAGE, generator=g)
    y = torch.randint(0, CLASSES, (total,), generator=g)
    return x[lo:hi], y[lo:hi]


def resnet(norm):
    import torch
    import torch.nn as nn
    from torchvision.models import resnet18
    torch.manual_seed(7)
    if norm == "group":
        model = resnet18(num_classes=CLASSES, norm_layer=lambda c: nn.GroupNorm(32, c))
    else:
        model = resnet18(num_classes=CLASSES)
        model.eval()  # BatchNorm normalises by its running statistics: per sample
    return model


def vit():
    import torch
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(11)
    return VisionTransformer(**VIT)


def sgd(params):
    """SGD with momentum: an update linear in the gradient (Adam would turn the rounding noise
    of a gradient that is exactly zero in theory, such as the key bias of attention, into
    steps of the full learning rate, differently in each summation order)."""
    import torch
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def relative(a, b):
    import torch
    if isinstance(a, torch.Tensor):
        a, b = a.double(), b.double()
        return float((a - b).norm() / b.norm().clamp_min(1e-30))
    return abs(a - b) / max(abs(b), 1e-30)


def worst(state, ref):
    """(largest relative difference, its key) over the tensors of two state_dicts."""
    return max(((relative(state[k], v) if v.is_floating_point() else
                 float(not bool((state[k] == v).all()))), k) for k, v in ref.items())


# ---- ShardedDataParallel ---------------------------------------------------------------------
def sharded_case(name, make, units=None, steps=3, total=4):
    import torch.distributed as dist
    import torch.nn.functional as F
    from heft.torch.parallel import (ShardedDataParallel, load_checkpoint,
                                     load_full_state_dict, save_checkpoint)
    rank, world = dist.get_rank(), dist.get_world_size()
    ref = make()
    ref_opt = sgd(ref.parameters())
    model = ShardedDataParallel(make(), units=units)
    opt = sgd(model.parameters())
    per, loss_diff = total // world, 0.0
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        opt.zero_grad()
        mine = slice(rank * per, (rank + 1) * per)
        loss = F.cross_entropy(model(x[mine]), y[mine])
        loss.backward()
        opt.step()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean)
        loss_diff = max(loss_diff, relative(mean.item() / world, ref_loss.item()))
    plain = ref.state_dict()
    state = model.full_state_dict()
    directory = os.path.join(os.environ["HEFT_TV_DIR"], "sdp-" + name.replace(" ", "-"))
    save_checkpoint(directory, model, opt)
    saved = load_full_state_dict(directory)
    fresh = ShardedDataParallel(make(), units=units)
    load_checkpoint(directory, fresh, sgd(fresh.parameters()))
    loaded = fresh.full_state_dict()
    return {"case": f"sharded {name}", "tolerance": SDP_TOL, "loss": loss_diff,
            "keys": [sorted(s) == sorted(plain) for s in (state, saved, loaded)],
            "state": worst(state, plain), "checkpoint": worst(saved, plain),
            "loaded": worst(loaded, plain), "units": len(model.units),
            "buffers": sum(1 for k in plain if "running" in k or "batches" in k)}


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    import torch.nn as nn
    dist.init_process_group("heft", init_method="env://")
    cases = [lambda: sharded_case("resnet18 batch", lambda: resnet("batch")),
             lambda: sharded_case("resnet18 group", lambda: resnet("group")),
             lambda: sharded_case("vit linear units", vit, units=[nn.Linear])]
    only = os.environ.get("HEFT_TV_ONLY")  # e.g. "2,3": those cases alone (while debugging)
    for i, case in enumerate(cases):
        if only and str(i) not in only.split(","):
            continue
        row = case()
        if dist.get_rank() == 0:
            print("case " + json.dumps(row), flush=True)
    dist.destroy_process_group()


class TorchvisionModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with tempfile.TemporaryDirectory() as directory:
            cls.results = support.run_ranks(
                2, [support.PYTHON, "-u", os.path.abspath(__file__)], timeout=240,
                env_of_rank=lambda r: {"HEFT_TV_WORKER": "1", "HEFT_TV_DIR": directory})
        cls.text = support.describe(cls.results)
        cls.cases = {}
        for line in cls.results[0][1].splitlines():
            if line.startswith("case "):
                row = json.loads(line[5:])
                print(json.dumps(row))
                cls.cases[row["case"]] = row

    def row(self, name):
        for rc, _, _ in self.results:
            self.assertEqual(rc, 0, self.text)
        self.assertIn(name, self.cases, self.text)
        return self.cases[name]

    def check_equal(self, row):
        tol = row["tolerance"]
        self.assertLessEqual(row["loss"], tol, row)
        self.assertTrue(all(row["keys"]), row)
        for what in ("state", "checkpoint", "loaded"):
            if what in row:
                self.assertLessEqual(row[what][0], tol, (what, row))

    def test_sharded_resnet18_batchnorm_eval(self):
        row = self.row("sharded resnet18 batch")
        self.check_equal(row)
        self.assertEqual(row["buffers"], 3 * 20, row)  # 20 BatchNorms' buffers saved
        self.assertGreater(row["units"], 2, row)

    def test_sharded_resnet18_groupnorm_train(self):
        self.check_equal(self.row("sharded resnet18 group"))

    def test_sharded_vision_transformer_linear_units(self):
        row = self.row("sharded vit linear units")
        self.check_equal(row)
        # Every nn.Linear but the attentions' out_proj (nn.MultiheadAttention uses its
        # weight without calling it): 2 per MLP and the head, and the root.
        self.assertEqual(row["units"], 2 * VIT["num_layers"] + 1 + 1, row)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if os.environ.get("HEFT_TV_WORKER"):
        worker()
        sys.exit(0)
    support.main_guard()
    unittest.main(verbosity=2)
