"""One rank of tests/python/ddp_test.py, started by `heft run -n W`.

Trains the same small model from the same initial parameters on the same data with
torch's DistributedDataParallel three times: over Gloo, over heft (through
heft.torch.parallel.DistributedDataParallel), and over heft with a Python comm hook that
goes through Work.get_future() (the canonical allreduce-and-divide hook). After 20 steps
the parameters must agree within TOLERANCE (the sums run in different orders, so not
bit for bit); the largest difference is printed. Then torch's fp16_compress_hook over heft
against the same hook over Gloo, and a bf16 compression hook over heft against Gloo
without compression (within HALF_TOLERANCE).
Exits 0 when all hold.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import heft.torch
import heft.torch.distributed as hdist
from heft.torch.parallel import DistributedDataParallel

STEPS = 20
TOLERANCE = 1e-5        # float32, 20 SGD steps
HALF_TOLERANCE = 1e-2   # gradients rounded to 16 bits for the wire


def fail(what):
    print(f"ddp_worker rank {dist.get_rank()}: FAILED: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 5))


def train(ddp, rank):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(100 * step + rank)
        x = torch.randn(16, 20, generator=g)
        y = torch.randint(0, 5, (16,), generator=g)
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in ddp.module.parameters()])


def allreduce_divide_hook(group, bucket):
    """The comm hook of torch's documentation, over heft's future."""
    world = dist.get_world_size(group)
    fut = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def bfloat16_wire_hook(group, bucket):
    """Gradients cross the wire as bfloat16, divided by the world size first."""
    world = dist.get_world_size(group)
    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(world)
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(f):
        buffer.copy_(f.value()[0])
        return buffer
    return fut.then(decompress)


def compare(a, b, tolerance, what):
    diff = (a - b).abs().max().item()
    if not diff <= tolerance:
        fail(f"{what}: parameters differ by up to {diff:.3g} (tolerance {tolerance:g})")
    return diff


def main():
    hdist.init_process_group()
    rank = dist.get_rank()
    heft_group = dist.distributed_c10d._get_default_group()
    backend = heft.torch.backend_of(heft_group)  # its heft backend: the counters
    gloo = dist.new_group(backend="gloo")

    # DDP's gradient buckets: a small cap, so several buckets overlap backward.
    gloo_params = train(nn.parallel.DistributedDataParallel(model(), process_group=gloo,
                                                            bucket_cap_mb=0.01), rank)
    before = backend.operations()
    direct_before = backend.completions()[3]
    heft_params = train(DistributedDataParallel(model(), bucket_cap_mb=0.01), rank)
    if backend.operations() - before < STEPS:
        fail(f"{backend.operations() - before} operations through heft in {STEPS} steps")
    # DDP's reducer takes its futures in C++ (no GIL) and waits on them, not on the Work:
    # its gradient all_reduces are completed by the communicator's thread as they finish.
    direct = backend.completions()[3] - direct_before
    if direct < STEPS:
        fail(f"only {direct} operations completed by the communicator's thread in {STEPS} DDP "
             "steps")
    d1 = compare(heft_params, gloo_params, TOLERANCE, "heft DDP against gloo DDP")
    # DDP takes each bucket's future at once, so its all_reduces are issued then and never
    # run on a caller's thread (after the first steps, whose bucket rebuild broadcasts
    # synchronously, as any caller's broadcast does).
    warm = DistributedDataParallel(model(), bucket_cap_mb=0.01)
    train(warm, rank)
    on_caller_before = backend.completions()[2]
    train(warm, rank)
    if backend.completions()[2] != on_caller_before:
        fail(f"{backend.completions()[2] - on_caller_before} of DDP's operations ran on the "
             "caller's thread (expected all issued at once, completed by the completion thread)")

    hooked = DistributedDataParallel(model(), bucket_cap_mb=0.01)
    hooked.register_comm_hook(heft_group, allreduce_divide_hook)
    by_thread_before, direct_before = backend.completions()[1], backend.completions()[3]
    d2 = compare(train(hooked, rank), gloo_params, TOLERANCE, "heft DDP with a future hook")
    # A Python hook's future (then() takes the GIL) is completed by the completion thread,
    # never by the communicator's.
    by_thread, direct = backend.completions()[1], backend.completions()[3]
    if direct != direct_before or by_thread - by_thread_before < STEPS:
        fail(f"with a Python hook, {direct - direct_before} operations were completed by the "
             f"communicator's thread and {by_thread - by_thread_before} by the completion "
             f"thread in {STEPS} steps (expected 0 and all)")

    fp16_gloo = nn.parallel.DistributedDataParallel(model(), process_group=gloo)
    fp16_gloo.register_comm_hook(gloo, default_hooks.fp16_compress_hook)
    fp16_heft = DistributedDataParallel(model())
    fp16_heft.register_comm_hook(heft_group, default_hooks.fp16_compress_hook)
    d3 = compare(train(fp16_heft, rank), train(fp16_gloo, rank), HALF_TOLERANCE,
                 "fp16_compress_hook over heft against over gloo")
    # torch 1.13 refuses any hook named bf16_compress_hook without CUDA and NCCL: the same
    # hook under another name,
    # over heft (Gloo has no bfloat16 all_reduce), against uncompressed Gloo.
    bf16_heft = DistributedDataParallel(model())
    bf16_heft.register_comm_hook(heft_group, bfloat16_wire_hook)
    d4 = compare(train(bf16_heft, rank), gloo_params, HALF_TOLERANCE,
                 "a bf16 compression hook over heft against gloo without compression")
    # Regression: the communicator's thread dropped the last reference to an operation whose
    # tensor Python had already freed; releasing it took the GIL, and a group destroyed with
    # the GIL held (DDP's reducer at exit) deadlocked joining that thread. Tensors dropped
    # right after their all_reduce, then every DDP model (and its reducer's group reference)
    # deleted before the group: must finish, not hang.
    for _ in range(3000):
        dist.all_reduce(torch.ones(3))
    del hooked, fp16_heft, bf16_heft, fp16_gloo
    import gc
    gc.collect()
    if rank == 0:
        print(f"steps={STEPS} max_diff_plain={d1:.3g} max_diff_future_hook={d2:.3g} "
              f"max_diff_fp16_hook={d3:.3g} max_diff_bf16_hook={d4:.3g}", flush=True)
    hdist.destroy_process_group()


if __name__ == "__main__":
    main()
