"""A torchrun-style training script for tests/python/estimator_test.py, as a cloud SDK user
writes one: hyperparameters as --name value arguments, env:// rendezvous, torch DDP (here over
the heft backend), the model saved to SM_MODEL_DIR by rank 0, a checkpoint per rank in
SM_CHECKPOINT_DIR. Rank 0 also writes info.json beside the model: what the job looked like
from inside (world size, the all-reduced sum of ranks, hosts, the training channel's files)."""
import argparse
import json
import os

import torch
import torch.distributed as dist

import heft.torch  # noqa: F401  (registers the backend "heft")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--tag", default="")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("heft", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    g = torch.Generator().manual_seed(rank)
    for step in range(1, args.steps + 1):
        x = torch.randn(8, 4, generator=g)
        loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step={step} loss={loss.item():.5f}", flush=True)
    with open(os.path.join(os.environ["SM_CHECKPOINT_DIR"], f"rank-{rank}.ckpt"), "w") as f:
        f.write(f"{args.steps}\n")
    if rank == 0:
        model_dir = os.environ["SM_MODEL_DIR"]
        torch.save(model.module.state_dict(), os.path.join(model_dir, "model.pt"))
        channel = os.environ.get("SM_CHANNEL_TRAINING")
        info = {"world": world, "sum_of_ranks": total.item(),
                "hosts": json.loads(os.environ["SM_HOSTS"]),
                "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
                "training_files": sorted(os.listdir(channel)) if channel else None,
                "tag": args.tag,
                "toolkit": {k: os.environ.get(k) for k in ("SM_LOG_LEVEL", "SM_MODULE_DIR",
                                                           "SM_USER_ENTRY_POINT")}}
        with open(os.path.join(model_dir, "info.json"), "w") as f:
            json.dump(info, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
