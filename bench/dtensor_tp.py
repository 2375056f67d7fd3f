"""The DTensor side of bench/tensor_parallel_python.sh: the benchmark's GPT (tp_gpt_model, which
the script writes and puts on PYTHONPATH) split by torch's own tensor parallelism,
parallelize_module over init_device_mesh("cpu", (world,)) on the Gloo backend, in the layout
heft's plan gives it: q/k/v and fc ColwiseParallel, proj and out RowwiseParallel (Megatron's
pairing), the token embedding RowwiseParallel (vocabulary rows, one all-reduce) and the head
ColwiseParallel with its logits left split for loss_parallel's cross-entropy. Same seed, batches,
AdamW and timing as the heft side, so the losses agree. Leaves out gradient clipping and
anything torch.compile would add.

A fused q/k/v projection is cut the way heft cuts it: its rows are reordered before the split
from [q | k | v] to T blocks [q_r | k_r | v_r], so ColwiseParallel's contiguous cut leaves rank r
its heads' q, k and v, and each block's `heads` is divided by T.

  dtensor_tp.py STEPS [BACKEND]   (every rank; rank 0 prints step=N loss=L step_s=S, every
                         rank memory: rank=R peak_rss_mb=M at the end). BACKEND: gloo (the
                         default) or heft (the same DTensor program on heft's collectives)
"""
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                               parallelize_module)

from tp_gpt_model import GPT, batch


def heads_together(qkv, parts):
    """Reorders the rows of a fused (3d, d) q/k/v nn.Linear in place, [q | k | v] -> `parts`
    blocks [q_r | k_r | v_r], so a contiguous cut in `parts` gives each rank whole heads."""
    with torch.no_grad():
        for p in (qkv.weight, qkv.bias):
            q, k, v = p.chunk(3)
            p.copy_(torch.cat([w.chunk(parts)[r] for r in range(parts) for w in (q, k, v)]))


def main(steps, backend):
    if backend == "heft":
        import heft.torch  # noqa: F401  registers the torch.distributed backend "heft"
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(0)
    model = GPT()
    for block in model.blocks:
        heads_together(block.qkv, world)
        block.heads //= world
    parallelize_module(model, mesh, {
        "tok": RowwiseParallel(input_layouts=Replicate()),
        "blocks.*.qkv": ColwiseParallel(), "blocks.*.proj": RowwiseParallel(),
        "blocks.*.fc": ColwiseParallel(), "blocks.*.out": RowwiseParallel(),
        "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(steps):
        idx = batch(step)  # (16, 129) bytes, the same on every rank
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(idx[:, :-1])  # DTensor (16, 128, 256), Shard(-1)
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), idx[:, 1:].flatten())
            loss.backward()
        opt.step()
        seconds = time.perf_counter() - t0
        if rank == 0:
            print(f"step={step + 1} loss={loss.full_tensor().item():.4f} step_s={seconds:.4f}",
                  flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"memory: rank={rank} peak_rss_mb={peak:.1f}", flush=True)
    dist.destroy_process_group()
    # torch 2.11's Gloo can abort in the interpreter's teardown after DTensor ran
    # (tests/python/torch2_strategies_test.py): leave without it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "gloo")
