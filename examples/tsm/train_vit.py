"""A script written for the cloud vendor's model-parallel library v2 (``torch.sagemaker``),
running on heft: the library's two lines (tsm.init, tsm.transform), then torch's FSDP2 over
tsm.state's data mesh. The only change from the vendor's version is the import.

    build/heft run -n 4 -- .venv/bin/python examples/tsm/train_vit.py

The configuration is SM_HP_MP_PARAMETERS when set (as the vendor's containers and `heft train`
with a modelparallel distribution deliver it), else CONFIG below: tensor parallel 2 x data 2
on 4 ranks. The model is torchvision's VisionTransformer laid out as vit_b_16 but tiny; the
data are STEPS batches of random images whose label is the brightest of 10 image regions, a
task it learns in a few dozen steps. Rank 0 prints the loss averaged over the data ranks."""
import os
import time

import torch
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torchvision.models.vision_transformer import VisionTransformer

import heft.torch.sagemaker as tsm  # was: import torch.sagemaker as tsm

CONFIG = {"tensor_parallel_degree": 2, "hybrid_shard_degree": 2, "random_seed": 0}
STEPS, GLOBAL_BATCH = 40, 32


def batch(step):
    """GLOBAL_BATCH images (3 x 32 x 32) and labels: the label is the index of the brightest
    of 10 horizontal bands, which the images' bands are brightened to show."""
    g = torch.Generator().manual_seed(step)
    y = torch.randint(0, 10, (GLOBAL_BATCH,), generator=g)
    x = torch.randn(GLOBAL_BATCH, 3, 32, 32, generator=g)
    for i, label in enumerate(y.tolist()):
        x[i, :, 3 * label:3 * label + 3, :] += 1.5
    return x, y


def main():
    torch.set_num_threads(1)
    tsm.init(None if os.environ.get("SM_HP_MP_PARAMETERS") else CONFIG)
    s = tsm.state
    model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=4,
                              hidden_dim=32, mlp_dim=64, num_classes=10)
    total = sum(p.numel() for p in model.parameters())
    model = tsm.transform(model)  # heads and MLPs split over the tensor group
    for layer in model.encoder.layers:
        fully_shard(layer, mesh=s.dp_mesh)
    fully_shard(model, mesh=s.dp_mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    if s.rank == 0:
        print(f"tsm: world {s.world_size} = tensor {s.tp_size} x data {s.dp_size} (shard "
              f"groups of {s.hybrid_shard_degree}); rank 0 holds "
              f"{sum(p.to_local().numel() for p in model.parameters())} of the model's {total} "
              "parameters", flush=True)
    start = time.monotonic()
    for step in range(STEPS):
        x, y = batch(step)
        x, y = x.chunk(s.dp_size)[s.dp_rank], y.chunk(s.dp_size)[s.dp_rank]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().reshape(1)
        dist.all_reduce(mean, group=s.dp_process_group)
        if s.rank == 0 and (step % 10 == 0 or step == STEPS - 1):
            print(f"step={step} loss={mean.item() / s.dp_size:.4f}", flush=True)
    if s.rank == 0:
        print(f"final: steps={STEPS} seconds={time.monotonic() - start:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
