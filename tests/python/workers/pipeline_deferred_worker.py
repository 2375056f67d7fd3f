"""One rank of tests/python/pipeline_deferred_test.py (`heft run -n 4`): a stack of 8 wide
layers built under heft.torch.parallel.deferred_init and split by Pipeline over 2 stages x
data 2; prints `ROW {json}` per rank: this rank's layers' values against one process building
the model after the same seed (exact), the replay's peak bytes and the whole model's, and the
losses of 3 steps against one process on the whole batch."""
import json

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


def main():
    hdist.init_process_group()
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
    print("ROW " + json.dumps(row), flush=True)
    dist.destroy_process_group()


main()
