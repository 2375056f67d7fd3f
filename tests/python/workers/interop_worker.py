"""One rank of tests/python/checkpoint_interop_test.py, one phase per `heft run`:

  fsdp2-4 DIR   FSDP2 (fully_shard per block and the root) on 4 ranks trains 9 steps from
                seed 0, saving a torch.distributed.checkpoint folder DIR/dcp after step 3
                (get_state_dict: model and AdamW state, sharded); its losses are the
                uninterrupted run's
  heft-2 DIR    heft's ShardedDataParallel on 2 ranks, built from another seed, loads DIR/dcp
                (read_dcp + load_torch_state_dicts) and trains steps 3-5, saving heft's
                checkpoint DIR/heft
  fsdp2-1 DIR   FSDP2 on 1 rank, from a third seed, loads DIR/heft (torch_state_dicts +
                torch's set_state_dict, full_state_dict=True) and trains steps 6-8

Each prints `LOSSES [...]` on rank 0: the global batch's mean loss per step."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import heft.torch.distributed as hdist
from heft.torch import parallel as hp

GLOBAL_BATCH, WIDTH, BLOCKS = 8, 32, 3


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.fc1 = nn.Linear(WIDTH, 2 * WIDTH)
        self.fc2 = nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.head = nn.Linear(WIDTH, 10)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    x, y = torch.randn(GLOBAL_BATCH, 16, generator=g), torch.randint(0, 10, (GLOBAL_BATCH,),
                                                                     generator=g)
    w, r = dist.get_world_size(), dist.get_rank()
    n = GLOBAL_BATCH // w
    return x[r * n:(r + 1) * n], y[r * n:(r + 1) * n]


def built(seed):
    torch.manual_seed(seed)
    return Model()


def adamw(params):
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)


def train(model, opt, steps):
    losses = []
    for k in steps:
        x, y = batch(k)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        t = loss.detach().double().reshape(1)
        dist.all_reduce(t)
        losses.append(t.item() / dist.get_world_size())
    return losses


def fsdp2(model):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for b in model.blocks:
        fully_shard(b, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def main():
    phase, folder = sys.argv[1], sys.argv[2]
    hdist.init_process_group()
    if phase == "fsdp2-4":
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict
        model = fsdp2(built(0))
        opt = adamw(model.parameters())
        losses = train(model, opt, range(3))
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(folder, "dcp"))
        losses += train(model, opt, range(3, 9))
    elif phase == "heft-2":
        model = hp.ShardedDataParallel(built(1))
        opt = adamw(model.parameters())
        saved = hp.read_dcp(os.path.join(folder, "dcp"))
        hp.load_torch_state_dicts(model, saved["model"], opt, saved["optim"])
        losses = train(model, opt, range(3, 6))
        hp.save_checkpoint(os.path.join(folder, "heft"), model, opt, step=6)
    elif phase == "fsdp2-1":
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict
        model = fsdp2(built(2))
        opt = adamw(model.parameters())
        msd, osd = hp.torch_state_dicts(os.path.join(folder, "heft"))
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd,
                       options=StateDictOptions(full_state_dict=True))
        losses = train(model, opt, range(6, 9))
    else:
        raise SystemExit(f"interop_worker: unknown phase {phase!r}")
    if dist.get_rank() == 0:
        print("LOSSES " + json.dumps(losses), flush=True)
    dist.destroy_process_group()


main()
