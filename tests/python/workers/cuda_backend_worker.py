"""One rank of tests/python/cuda_backend_test.py, started by `heft run -n 2` on a machine with a
GPU; the ranks share GPU 0 (NCCL refuses that, heft stages through pinned host memory).

Every collective of backend heft on CUDA tensors gives what the same call gives on CPU
tensors (the same host collective: exactly), its outputs stay on the GPU, the staging
counter grew by what was staged, and torch's DDP on the GPU over heft ends with the
parameters DDP over Gloo ends with, bit for bit (a sum of two values has one result).
Prints `cuda_backend_worker: checked=N staged=T` on rank 0.
"""
import sys

import torch
import torch.distributed as dist

import heft.torch
import heft.torch.distributed as hdist

checked = 0


def fail(what):
    print(f"cuda_backend_worker rank {dist.get_rank()}: FAILED: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def same(name, gpu, cpu):
    global checked
    if gpu.device.type != "cuda":
        fail(f"{name}: result on {gpu.device}, expected cuda")
    if not torch.equal(gpu.cpu(), cpu):
        fail(f"{name}: GPU result differs from the CPU's: {gpu.cpu()[:8]} vs {cpu[:8]}")
    checked += 1


def main():
    hdist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    before = heft.torch.ProcessGroupHeft.cuda_staged()
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(-5, 6, (40_003,), generator=g).float()

    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.MAX):
        c, d = x.clone(), x.to(dev)
        dist.all_reduce(c, op=op)
        dist.all_reduce(d, op=op)
        same(f"all_reduce {op}", d, c)
    b = (x > 0)
    c, d = b.clone(), b.to(dev)
    dist.all_reduce(c)
    dist.all_reduce(d)
    same("all_reduce bool", d, c)
    c, d = x.clone(), x.to(dev)
    dist.broadcast(c, src=1)
    dist.broadcast(d, src=1)
    same("broadcast", d, c)
    # Non-contiguous: a column of a matrix.
    m = x[:40_000].view(200, 200).t()
    c, d = m.clone(), m.to(dev).t().contiguous().t()
    dist.all_reduce(c)
    dist.all_reduce(d)
    same("all_reduce non-contiguous", d, c)
    outs_c = [torch.empty_like(x) for _ in range(world)]
    outs_d = [torch.empty_like(x, device=dev) for _ in range(world)]
    dist.all_gather(outs_c, x)
    dist.all_gather(outs_d, x.to(dev))
    for i in range(world):
        same(f"all_gather [{i}]", outs_d[i], outs_c[i])
    c, d = torch.empty(world * x.numel()), torch.empty(world * x.numel(), device=dev)
    dist.all_gather_into_tensor(c, x)
    dist.all_gather_into_tensor(d, x.to(dev))
    same("all_gather_into_tensor", d, c)
    big = torch.randint(-5, 6, (world * 1000,), generator=g).float()
    c, d = torch.empty(1000), torch.empty(1000, device=dev)
    dist.reduce_scatter_tensor(c, big)
    dist.reduce_scatter_tensor(d, big.to(dev))
    same("reduce_scatter_tensor", d, c)
    c, d = torch.empty_like(big), torch.empty_like(big, device=dev)
    dist.all_to_all_single(c, big)
    dist.all_to_all_single(d, big.to(dev))
    same("all_to_all_single", d, c)
    peer = 1 - rank
    c, d = torch.empty(1000), torch.empty(1000, device=dev)
    if rank == 0:
        dist.send(big[:1000], peer)
        dist.send(big[:1000].to(dev), peer)
        dist.recv(c, peer)
        dist.recv(d, peer)
    else:
        dist.recv(c, peer)
        dist.recv(d, peer)
        dist.send(big[:1000], peer)
        dist.send(big[:1000].to(dev), peer)
    same("send/recv", d, c)
    after = heft.torch.ProcessGroupHeft.cuda_staged()
    if after["tensors"] <= before["tensors"] or after["bytes"] < before["bytes"] + 7 * x.numel() * 4:
        fail(f"the staging counter did not grow as staged: {before} -> {after}")

    # DDP on the GPU: heft and Gloo end bit for bit equal.
    gloo = dist.new_group(backend="gloo")
    sums = {}
    for name, group in (("heft", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 64)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(100 + rank)
        for _ in range(5):
            loss = ddp(torch.randn(32, 64, generator=gen).to(dev)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        sums[name] = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    if not torch.equal(sums["heft"], sums["gloo"]):
        fail(f"DDP on the GPU: heft and Gloo differ by {(sums['heft'] - sums['gloo']).abs().max()}")
    global checked
    checked += 1
    if rank == 0:
        print(f"cuda_backend_worker: checked={checked} staged={after['tensors'] - before['tensors']}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
