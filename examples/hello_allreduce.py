#!/usr/bin/env python3
"""A torchrun-style PyTorch script, unchanged for heft: run it with
    build/heft run --hosts 2 -n 2 -- .venv/bin/python -u examples/hello_allreduce.py
Each worker joins the group through torch's env:// rendezvous (MASTER_ADDR/MASTER_PORT,
RANK, WORLD_SIZE from heft run) and all-reduces its rank."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
x = torch.tensor([float(rank)])
dist.all_reduce(x)
print(f"rank {rank}/{world} on {os.environ['SM_CURRENT_HOST']} "
      f"(local rank {os.environ['LOCAL_RANK']}): sum of ranks = {x.item():g}")
dist.destroy_process_group()
