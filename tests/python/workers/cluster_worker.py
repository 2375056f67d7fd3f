"""A torchrun-style script for estimator_cluster_test.py: one all_reduce on backend heft over
the whole world, then what it saw (its host, the instance type the toolkit reports, the sum) to
SM_OUTPUT_DATA_DIR/seen-<RANK>.json; rank 0 saves its "model" to /opt/ml/model (the container's
path, which heft maps onto the job's model folder on every host)."""
import json
import os
import socket

import torch
import torch.distributed as dist

import heft.torch  # noqa: F401  (registers backend heft)


def main():
    dist.init_process_group("heft")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    with open(os.path.join(os.environ["SM_INPUT_CONFIG_DIR"], "resourceconfig.json")) as f:
        resources = json.load(f)
    seen = {"rank": rank, "world": world, "sum": t.item(), "uts": socket.gethostname(),
            "host": os.environ["SM_CURRENT_HOST"],
            "instance_type": os.environ["SM_CURRENT_INSTANCE_TYPE"],
            "resource_instance_type": resources["current_instance_type"],
            "training_env_instance_type": json.loads(os.environ["SM_TRAINING_ENV"])[
                "current_instance_type"]}
    with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], f"seen-{rank}.json"), "w") as f:
        json.dump(seen, f)
    if rank == 0:
        with open("/opt/ml/model/model.pt", "w") as f:
            f.write("model of %d ranks\n" % world)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
