#!/usr/bin/env python3
"""heft's ShardedDataParallel on a CUDA model, one rank (heft run -n 1): 5 steps of a small
MLP against the same model trained by plain PyTorch on the GPU; prints the largest
parameter difference or the error heft raises (docs/gpu.md: the Python strategies on CUDA
tensors are not done yet, so an error naming the device is the expected answer until they are).
"""
import sys

import torch


def main():
    import heft.torch.distributed as hd
    from heft.torch.parallel import ShardedDataParallel
    hd.init_process_group()
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    mine = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    mine.load_state_dict(ref.state_dict())
    ref.to(dev)
    mine.to(dev)
    try:
        sdp = ShardedDataParallel(mine)
        opt = torch.optim.SGD(sdp.parameters(), lr=0.05)
    except Exception as e:  # noqa: BLE001  the answer is the message
        print(f"sharded_cuda: refused: {type(e).__name__}: {e}", flush=True)
        return 1
    ropt = torch.optim.SGD(ref.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        x = torch.randn(32, 64, generator=g).to(dev)
        for m, o in ((sdp, opt), (ref, ropt)):
            loss = m(x).square().mean()
            o.zero_grad()
            loss.backward()
            o.step()
    full, want = sdp.full_state_dict(), ref.state_dict()
    diff = max((full[k].float().cpu() - want[k].float().cpu()).abs().max().item() for k in want)
    print(f"sharded_cuda_max_diff: {diff:.3g}", flush=True)
    return 0 if diff < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
