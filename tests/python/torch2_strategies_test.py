# ctest-labels: multiproc
"""torch 2's own parallel strategies on the backend heft, against the same script on Gloo:
FSDP2 (`fully_shard` over three blocks and the root), DTensor tensor parallelism
(`parallelize_module` with ColwiseParallel/RowwiseParallel on `init_device_mesh("cpu", ...)`)
and both on one 2-D mesh (data x tensor). Each case trains a small model 6 steps with AdamW
from the same seed, once per backend, and the losses must agree within 1e-6 relative (fp32).
The `vit_*` modes (1e-5 across hosts, where the sums run in another order) do the same to a model nobody here wrote: torchvision's VisionTransformer
(tests/python/torchvision_cases.py), FSDP2 over each encoder layer and the root, or DTensor's
colwise/rowwise plan on each encoder layer's MLP, SGD with momentum on images.
Worlds: 2 started by `.venv/bin/torchrun` (torch's own launcher, env:// init), 4 started by
`heft run` as 2 simulated hosts x 2 (shared memory in a host, TCP across).

The same file is the worker: `torch2_strategies_test.py worker BACKEND MODE`; rank 0 prints
`loss STEP VALUE` lines and, on heft, `heft_operations=N` (heft's own counter: the collectives
went through heft, not through a fallback).
"""
import os
import re
import subprocess
import sys
import unittest

import support

STEPS = 6
TORCHRUN = os.path.join(os.path.dirname(support.PYTHON), "torchrun")


class Torch2Strategies(unittest.TestCase):
    def launch(self, launcher, world, backend, mode):
        me = os.path.abspath(__file__)
        if launcher == "torchrun":
            cmd = [TORCHRUN, "--nproc-per-node", str(world), "--master-port",
                   str(support.free_port()), me, "worker", backend, mode]
            env = support.clean_env(PYTHONPATH=os.path.join(support.BINARY_DIR, "python"))
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        else:
            r = support.heft_run(["--hosts", "2", "-n", str(world // 2), "--", support.PYTHON,
                                  "-u", me, "worker", backend, mode], timeout=300)
        self.assertEqual(r.returncode, 0, f"{launcher} {backend} {mode}:\n{r.stdout}{r.stderr}")
        losses = [float(v) for v in re.findall(r"^(?:\[rank 0\] )?loss \d+ (\S+)$", r.stdout, re.M)]
        self.assertEqual(len(losses), STEPS, r.stdout + r.stderr)
        if backend == "heft":
            ops = re.search(r"heft_operations=(\d+)", r.stdout)
            self.assertIsNotNone(ops, r.stdout)
            self.assertGreater(int(ops[1]), STEPS, "the collectives did not go through heft")
        return losses

    def same_as_gloo(self, launcher, world, mode, tol=1e-6):
        gloo = self.launch(launcher, world, "gloo", mode)
        heft = self.launch(launcher, world, "heft", mode)
        worst = max(abs(h - g) / abs(g) for h, g in zip(heft, gloo))
        print(f"{mode} world {world} ({launcher}): gloo {gloo}\n  heft {heft}\n  largest "
              f"relative difference {worst:.2e}")
        self.assertLessEqual(worst, tol)
        # It trained: the last loss is below the first.
        self.assertLess(heft[-1], heft[0])

    def test_fsdp2_world_2_torchrun(self):
        self.same_as_gloo("torchrun", 2, "fsdp")

    def test_tensor_parallel_world_2_torchrun(self):
        self.same_as_gloo("torchrun", 2, "tp")

    def test_fsdp2_world_4_two_hosts(self):
        self.same_as_gloo("heft", 4, "fsdp")

    def test_fsdp2_and_tensor_parallel_2d_mesh_two_hosts(self):
        self.same_as_gloo("heft", 4, "2d")

    def test_fsdp2_torchvision_vit_two_hosts(self):
        # Across hosts heft reduces inside each host first, Gloo in a ring: another order of
        # the same fp32 sums; 6 SGD steps carry the rounding to 1.6e-6 of the last loss.
        self.same_as_gloo("heft", 4, "vit_fsdp", tol=1e-5)

    def test_tensor_parallel_torchvision_vit_world_2_torchrun(self):
        self.same_as_gloo("torchrun", 2, "vit_tp")


# ---- the worker: one rank ----

def worker(backend, mode):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    import heft.torch

    torch.set_num_threads(1)
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.up = nn.Linear(d, 4 * d)
            self.down = nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.down(torch.relu(self.up(x)))

    model = nn.Sequential(*[Block(32) for _ in range(3)], nn.Linear(32, 8))
    data_rank, data_world = rank, world  # which share of the global batch this rank takes
    vision = mode.startswith("vit_")
    if vision:
        import torchvision_cases as cases
        model = cases.vit()
        layers = list(model.encoder.layers)
        if mode == "vit_fsdp":
            for layer in layers:
                fully_shard(layer)
            fully_shard(model)
        else:  # vit_tp: each encoder layer's MLP, Megatron-style
            mesh = init_device_mesh("cpu", (world,))
            for layer in layers:
                parallelize_module(layer.mlp, mesh, {"0": ColwiseParallel(), "3": RowwiseParallel()})
            data_rank, data_world = 0, 1
    elif mode == "fsdp":
        for block in model[:3]:
            fully_shard(block)
        fully_shard(model)
    elif mode == "tp":
        mesh = init_device_mesh("cpu", (world,))
        for block in model[:3]:
            parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
        data_rank, data_world = 0, 1
    else:  # 2d: tensor parallel inside pairs, FSDP2 across them
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("data", "tensor"))
        for block in model[:3]:
            parallelize_module(block, mesh["tensor"],
                               {"up": ColwiseParallel(), "down": RowwiseParallel()})
            fully_shard(block, mesh=mesh["data"])
        fully_shard(model, mesh=mesh["data"])
        data_rank, data_world = mesh["data"].get_local_rank(), world // 2
    if vision:
        optimizer = cases.sgd(model.parameters())
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    x_all = torch.randn(16, 32, generator=g)
    y_all = torch.randint(0, 8, (16,), generator=g)
    if vision:  # 8 images, the same each step: the model can learn them in 6 steps
        x_all, y_all = cases.batch(0, 0, 8, 8)
    for step in range(STEPS):
        x = x_all.chunk(data_world)[data_rank]
        y = y_all.chunk(data_world)[data_rank]
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        if rank == 0:
            print(f"loss {step} {mean.item() / world:.9g}", flush=True)
    if backend == "heft" and rank == 0:
        groups = [None] + ([mesh["data"].get_group(), mesh["tensor"].get_group()]
                           if mode == "2d" else [])
        ops = sum(heft.torch.backend_of(group).operations() for group in groups)
        print(f"heft_operations={ops}", flush=True)
    dist.destroy_process_group()
    if backend == "gloo":
        # torch 2.11's Gloo aborts at interpreter exit after DTensor runs ("terminate called
        # without an active exception", 3 of 16 plain torchrun runs of this script with no
        # heft imported): the reference run leaves without the interpreter's teardown.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        support.main_guard()
        unittest.main()
