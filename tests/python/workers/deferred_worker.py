"""One rank of tests/python/deferred_init_test.py (`heft run -n 4`), argv[1] the strategy:
  pipeline  a stack of 8 wide layers built under heft.torch.parallel.deferred_init, split by
            Pipeline over 2 stages x data 2
  tensor    a small transformer (embedding, nn.MultiheadAttention, MLP, head) built under
            deferred_init, split by tensor_parallel over tensor 2 x data 2 (DDP)
Prints `ROW {json}` per rank: this rank's values against one process building the model after
the same seed (exact), the parameter bytes it holds, the replay's peak and the whole model's,
torch's generator against one process's, and the losses of 3 steps against one process on
the whole batch."""
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import heft.torch.distributed as hdist
from heft.torch import parallel as hp

WIDTH, LAYERS, BATCH = 256, 8, 16


def make():
    layers = [nn.Linear(32, WIDTH), nn.GELU()]
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(WIDTH, 10))


def data(step):
    g = torch.Generator().manual_seed(50 + step)
    return torch.randn(BATCH, 32, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


def pipeline_case():
    torch.manual_seed(3)
    ref = make()
    one_process_rng = torch.get_rng_state()  # where the constructor leaves the generator
    whole = sum(p.numel() * p.element_size() for p in ref.parameters())
    torch.manual_seed(3)
    with hp.deferred_init():
        model = make()
    pipe = hp.Pipeline(model, hp.DeviceMesh(pipeline=2), microbatches=4,
                       schedule="interleaved")
    rng_as_one_process = torch.equal(torch.get_rng_state(), one_process_rng)
    refsd, equal, held = ref.state_dict(), True, 0
    for chunk in pipe.chunks:
        inner = getattr(chunk, "module", chunk)
        for k, v in inner.state_dict().items():
            equal &= torch.equal(v, refsd[k])
        held += sum(p.numel() * p.element_size() for p in inner.parameters())
    empty = sum(1 for p in model.parameters() if p.numel() == 0)
    opt = torch.optim.SGD(pipe.parameters(), lr=0.05, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    losses, reference = [], []
    d, r = pipe.mesh.size("data"), pipe.mesh.coordinate("data")
    for step in range(3):
        x, y = data(step)
        n = BATCH // d
        opt.zero_grad()
        losses.append(pipe.step(x[r * n:(r + 1) * n], y[r * n:(r + 1) * n], F.cross_entropy))
        opt.step()
        ref_opt.zero_grad()
        loss = F.cross_entropy(ref(x), y)
        loss.backward()
        ref_opt.step()
        reference.append(loss.item())
    row = {"rank": dist.get_rank(), "stage": pipe.stage, "equal": bool(equal),
           "peak": pipe.deferred_peak_bytes, "held": held, "whole": whole, "empty": empty,
           "losses": losses, "reference": reference, "rng": rng_as_one_process,
           "plan": pipe.plan_text}
    return row


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(64), nn.LayerNorm(64)
        self.attn = nn.MultiheadAttention(64, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(128, 64)
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(64, 128)

    def forward(self, ids):
        return self.head(self.blocks(self.embed(ids)))


PLAN = {"embed": "vocab", "blocks.*.attn": "heads", "blocks.*.mlp.0": "colwise",
        "blocks.*.mlp.2": "rowwise"}


def tokens(step):
    g = torch.Generator().manual_seed(70 + step)
    ids = torch.randint(0, 128, (BATCH, 9), generator=g)
    return ids[:, :-1], ids[:, 1:]


def tensor_case():
    torch.manual_seed(4)
    ref = Tiny()
    one_process_rng = torch.get_rng_state()
    whole = sum(p.numel() * p.element_size() for p in ref.parameters())
    torch.manual_seed(4)
    with hp.deferred_init():
        model = Tiny()
    mesh = hp.DeviceMesh(tensor=2)
    hp.tensor_parallel(model, PLAN, mesh)
    rng_as_one_process = torch.equal(torch.get_rng_state(), one_process_rng)
    held = sum(p.numel() * p.element_size() for p in model.parameters())
    metas = sum(1 for p in model.parameters() if p.is_meta)
    full = hp.tensor.full_state_dict(model)
    refsd = ref.state_dict()
    equal = sorted(full) == sorted(refsd) and all(torch.equal(full[k], refsd[k]) for k in refsd)
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=mesh.group("data"))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    losses, reference = [], []
    d, r = mesh.size("data"), mesh.coordinate("data")
    for step in range(3):
        x, y = tokens(step)
        n = BATCH // d
        opt.zero_grad()
        loss = F.cross_entropy(ddp(x[r * n:(r + 1) * n]).flatten(0, 1), y[r * n:(r + 1) * n].flatten())
        loss.backward()
        opt.step()
        t = loss.detach().double().reshape(1)
        dist.all_reduce(t, group=mesh.group("data"))
        losses.append(t.item() / d)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x).flatten(0, 1), y.flatten())
        ref_loss.backward()
        ref_opt.step()
        reference.append(ref_loss.item())
    return {"rank": dist.get_rank(), "equal": bool(equal), "held": held, "whole": whole,
            "peak": model.deferred_peak_bytes, "metas": metas, "losses": losses,
            "reference": reference, "rng": rng_as_one_process}


def main():
    hdist.init_process_group()
    row = {"pipeline": pipeline_case, "tensor": tensor_case}[sys.argv[1]]()
    print("ROW " + json.dumps(row), flush=True)
    dist.destroy_process_group()


main()
