# ctest-labels: multiproc
"""ShardedDataParallel over a DeviceMesh (issue 28 item 4, the first composition), 4 real
ranks: `mesh=DeviceMesh(sharded=2)` shards and replicates over the same groups as
`sharded_degree=2`, so 6 AdamW steps of the test GPT give bit-identical losses; with
`DeviceMesh(tensor=2, sharded=2)` the shard groups are the mesh's data groups (ranks {0,2}
and {1,3}: the tensor ranks hold other model parts), no replicate group, and the two tensor
coordinates of one data index train alike. Giving both sharded_degree and mesh, or a mesh
that is not a DeviceMesh, is refused naming the argument. This file is also the worker
(HEFT_SDP_MESH_WORKER=1): rank 0 prints one `result ` JSON line."""
import json
import os
import sys
import unittest

import support

STEPS, GLOBAL_BATCH, LR = 6, 8, 3e-3


def train(model, world_rank, data_index, data_size):
    import torch
    import torch.distributed as dist
    import sharded_models as M
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    per = GLOBAL_BATCH // data_size
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        x, y = M.batch("gpt", step, data_index * per, (data_index + 1) * per)
        loss = M.loss_of("gpt", model(x), y)
        loss.backward()
        opt.step()
        total = loss.detach().reshape(1).clone()
        dist.all_reduce(total)
        losses.append(total.item())
    return losses, loss.item()


def worker():
    import torch.distributed as dist
    import heft.torch  # noqa: F401  (registers the backend)
    from heft.torch.parallel import DeviceMesh, ShardedDataParallel
    import sharded_models as M
    dist.init_process_group("heft", init_method="env://")
    rank = dist.get_rank()
    out = {}
    by_degree = ShardedDataParallel(M.make("gpt"), sharded_degree=2)
    out["degree"], _ = train(by_degree, rank, rank, 4)
    mesh = DeviceMesh(sharded=2)
    by_mesh = ShardedDataParallel(M.make("gpt"), mesh=mesh)
    out["mesh"], _ = train(by_mesh, rank, rank, 4)
    out["mesh_groups"] = [by_mesh.shard_group.size, by_mesh.replicate_group.size,
                          by_mesh.counters["replicate_allreduces"] > 0]
    mesh_t = DeviceMesh(tensor=2, sharded=2)
    by_mesh_t = ShardedDataParallel(M.make("gpt"), mesh=mesh_t)
    _, last = train(by_mesh_t, rank, mesh_t.coordinate("data"), mesh_t.size("data"))
    lasts = [None] * dist.get_world_size()
    dist.all_gather_object(lasts, [mesh_t.ranks("sharded"), by_mesh_t.replicate_group, last])
    out["tensor_mesh"] = [[r[0], r[1] is None, r[2]] for r in lasts]
    errors = []
    for kwargs in ({"sharded_degree": 2, "mesh": mesh}, {"mesh": "data"}):
        try:
            ShardedDataParallel(M.make("gpt"), **kwargs)
            errors.append(None)
        except (TypeError, ValueError) as e:
            errors.append(str(e))
    out["errors"] = errors
    if rank == 0:
        print("result " + json.dumps(out), flush=True)
    dist.destroy_process_group()


class ShardedMesh(unittest.TestCase):
    def test_mesh_groups_equal_the_degree_and_compose_with_tensor(self):
        results = support.run_ranks(4, [support.PYTHON, "-u", os.path.abspath(__file__)],
                                    timeout=240,
                                    env_of_rank=lambda r: {"HEFT_SDP_MESH_WORKER": "1"})
        text = support.describe(results)
        for rc, _, _ in results:
            self.assertEqual(rc, 0, text)
        lines = [l for l in results[0][1].splitlines() if l.startswith("result ")]
        self.assertEqual(len(lines), 1, text)
        out = json.loads(lines[0][7:])
        print(json.dumps(out))
        self.assertEqual(out["degree"], out["mesh"])  # the same groups: bit-identical
        self.assertEqual(out["mesh_groups"], [2, 2, True])
        ranks = [r[0] for r in out["tensor_mesh"]]
        self.assertEqual(ranks, [[0, 2], [1, 3], [0, 2], [1, 3]])
        self.assertTrue(all(r[1] for r in out["tensor_mesh"]))  # no replicate group
        last = [r[2] for r in out["tensor_mesh"]]
        self.assertEqual(last[0], last[1])  # tensor coordinates 0 and 1 of data index 0
        self.assertEqual(last[2], last[3])
        both, wrong = out["errors"]
        self.assertIn("sharded_degree or mesh", both or "")
        self.assertIn("mesh must be a heft.torch.parallel.DeviceMesh", wrong or "")


if __name__ == "__main__":
    if os.environ.get("HEFT_SDP_MESH_WORKER"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        worker()
    else:
        unittest.main(verbosity=2)
