"""A torchrun-style worker for the `heft run` tests (tests/cli/run_test.cc).

Checks that the torchrun and cloud-container variables heft gives each worker agree with
each other, then joins torch.distributed with gloo over init_method="env://" (MASTER_ADDR,
MASTER_PORT) and checks all_reduce of the rank against the closed-form sum, all_gather of
rank * 10, and a barrier. Exits 0 when everything holds, 1 with a message otherwise.
Leaves out: GPUs, NCCL, anything heft-specific beyond the environment.
"""
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist


def check(cond, what):
    if not cond:
        print(f"torchrun_script: check failed: {what}", file=sys.stderr, flush=True)
        sys.exit(1)


def check_environment():
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    local_rank, local_world = int(env["LOCAL_RANK"]), int(env["LOCAL_WORLD_SIZE"])
    group_rank = int(env["GROUP_RANK"])
    hosts = json.loads(env["SM_HOSTS"])
    check(0 <= rank < world, f"RANK {rank} in [0, {world})")
    check(rank == group_rank * local_world + local_rank,
          f"RANK {rank} == GROUP_RANK {group_rank} * LOCAL_WORLD_SIZE {local_world} "
          f"+ LOCAL_RANK {local_rank}")
    check(len(hosts) * local_world == world, f"{len(hosts)} hosts x {local_world} == {world}")
    # The local launcher's simulated hosts are algo-1, algo-2, ...; mpirun's are the hostfile's.
    named = hosts[group_rank] if "HEFT_MPI_HOSTS" in env else f"algo-{group_rank + 1}"
    check(env["SM_CURRENT_HOST"] == hosts[group_rank] == named,
          f"SM_CURRENT_HOST {env['SM_CURRENT_HOST']} is hosts[{group_rank}] of {hosts}")
    check(env["HEFT_HOST"] == env["SM_CURRENT_HOST"], "HEFT_HOST == SM_CURRENT_HOST")
    check(env["MASTER_PORT"] != env["HEFT_STORE"].rsplit(":", 1)[1],
          "MASTER_PORT differs from the heft store's port")
    check(env["TORCHELASTIC_RESTART_COUNT"] == "0", "TORCHELASTIC_RESTART_COUNT == 0")
    return rank, world


def main():
    rank, world = check_environment()
    timeout = datetime.timedelta(seconds=int(os.environ["HEFT_TIMEOUT"]))
    dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    check(dist.get_rank() == rank and dist.get_world_size() == world,
          f"torch sees rank {dist.get_rank()} of {dist.get_world_size()}")

    total = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(total)
    check(total.item() == world * (world - 1) // 2,
          f"all_reduce of ranks = {total.item()}, expected {world * (world - 1) // 2}")

    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank * 10], dtype=torch.int64))
    got = [int(t.item()) for t in gathered]
    check(got == [r * 10 for r in range(world)], f"all_gather gave {got}")

    dist.barrier()
    print(f"rank {rank}/{world} on {os.environ['SM_CURRENT_HOST']}: "
          f"all_reduce={total.item()} all_gather={got} ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
