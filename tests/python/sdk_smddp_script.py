"""A script written for the cloud's data-parallel library (smdistributed.dataparallel), ported
by its one-line alias `import heft.torch.distributed as dist`; it also loads the library's own
module names through heft.torch.distributed.alias_smdistributed(). Each rank writes what it saw
to SM_OUTPUT_DATA_DIR/rank-N.json for tests/python/estimator_test.py."""
import json
import os

import torch

import heft.torch.distributed as dist  # was: import smdistributed.dataparallel.torch.distributed as dist

available_before_init = dist.is_available()
dist.alias_smdistributed()
import smdistributed.dataparallel.torch.distributed as smdist  # noqa: E402
from smdistributed.dataparallel.torch.parallel.distributed import \
    DistributedDataParallel as DDP  # noqa: E402

torch.set_num_threads(1)
dist.init_process_group()
rank, world = dist.get_rank(), dist.get_world_size()
# all_to_all_single: rank r sends r*10+j to rank j, so rank r receives j*10+r from each j.
sent = torch.tensor([float(rank * 10 + j) for j in range(world)])
received = torch.empty(world)
dist.all_to_all_single(received, sent)
model = DDP(torch.nn.Linear(2, 1))
model(torch.ones(3, 2)).sum().backward()
info = {"available": available_before_init, "rank": rank, "world": world,
        "local_rank": dist.get_local_rank(), "local_size": dist.get_local_size(),
        "node_rank": dist.get_node_rank(), "num_nodes": dist.get_num_nodes(),
        "library_module_is_heft": smdist is dist, "ddp_class": DDP.__module__ + "." + DDP.__name__,
        "received": received.tolist(), "backend": str(dist.get_backend())}
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], f"rank-{rank}.json"), "w") as f:
    json.dump(info, f)
dist.barrier()
dist.destroy_process_group()
