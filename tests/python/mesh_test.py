# ctest-labels: multiproc
"""heft.torch.parallel.DeviceMesh: the layout is the C++ MeshLayout's (the worked example of
src/heft/parallel/mesh_layout.h, 16 ranks, through the binding, written out here); then 4
ranks under `heft run`, for the placements cluster, spread and TDP and the shapes tensor 2 x
data 2, pipeline 2 x data 2 with sharded 2, tensor 2 x pipeline 2 (and data 4 sharded 2 for
a replicate dimension): each rank's groups, coordinates and sizes equal the ones written out
below and the binding's; an all_reduce over each group of the rank number gives the sum of
the group's members, and of 2**rank exactly its members, through heft's process group (its
operation counter moves); bad arguments raise ValueError naming the argument on every rank,
before any group is made, and ranks asking for different meshes all raise. This file is
also the worker (argument --worker)."""
import json
import os
import sys
import unittest

import support

# Written out from the layout rules (mesh_layout.h): the right-most letter of the placement
# varies fastest over consecutive ranks; sharded None = the whole data group.
S = [[0], [1], [2], [3]]  # singletons
CASES = [
    # tensor 2 x data 2: cluster (DPT) rank = 2d + t; spread (TPD) and TDP rank = 2t + d
    (dict(tensor=2), "cluster", dict(data=[[0, 2], [1, 3]], pipeline=S, tensor=[[0, 1], [2, 3]],
                                     sharded=[[0, 2], [1, 3]], replicate=S)),
    (dict(tensor=2), "spread", dict(data=[[0, 1], [2, 3]], pipeline=S, tensor=[[0, 2], [1, 3]],
                                    sharded=[[0, 1], [2, 3]], replicate=S)),
    (dict(tensor=2), "TDP", dict(data=[[0, 1], [2, 3]], pipeline=S, tensor=[[0, 2], [1, 3]],
                                 sharded=[[0, 1], [2, 3]], replicate=S)),
    # pipeline 2 x data 2, sharded 2: cluster and TDP rank = 2d + p; spread rank = 2p + d
    (dict(data=2, pipeline=2, sharded=2), "cluster",
     dict(data=[[0, 2], [1, 3]], pipeline=[[0, 1], [2, 3]], tensor=S, sharded=[[0, 2], [1, 3]],
          replicate=S)),
    (dict(data=2, pipeline=2, sharded=2), "spread",
     dict(data=[[0, 1], [2, 3]], pipeline=[[0, 2], [1, 3]], tensor=S, sharded=[[0, 1], [2, 3]],
          replicate=S)),
    (dict(data=2, pipeline=2, sharded=2), "TDP",
     dict(data=[[0, 2], [1, 3]], pipeline=[[0, 1], [2, 3]], tensor=S, sharded=[[0, 2], [1, 3]],
          replicate=S)),
    # tensor 2 x pipeline 2: cluster rank = 2p + t; spread and TDP rank = 2t + p
    (dict(pipeline=2, tensor=2), "cluster",
     dict(data=S, pipeline=[[0, 2], [1, 3]], tensor=[[0, 1], [2, 3]], sharded=S, replicate=S)),
    (dict(pipeline=2, tensor=2), "spread",
     dict(data=S, pipeline=[[0, 1], [2, 3]], tensor=[[0, 2], [1, 3]], sharded=S, replicate=S)),
    (dict(pipeline=2, tensor=2), "TDP",
     dict(data=S, pipeline=[[0, 1], [2, 3]], tensor=[[0, 2], [1, 3]], sharded=S, replicate=S)),
    # data 4, sharded 2: shards contiguous in the data index, replicas across them; the data
    # group is the whole world (the default group itself)
    (dict(sharded=2), "cluster",
     dict(data=[[0, 1, 2, 3]], pipeline=S, tensor=S, sharded=[[0, 1], [2, 3]],
          replicate=[[0, 2], [1, 3]])),
]

# (arguments, words of the message) raised on every rank.
BAD = [
    (dict(data=2, pipeline=2, tensor=2),
     "DeviceMesh: data x pipeline x tensor = 2 x 2 x 2 = 8, but the world has 4 ranks"),
    (dict(tensor=3), "DeviceMesh: pipeline x tensor = 1 x 3 = 3 does not divide the world of 4"),
    (dict(sharded=3), "DeviceMesh: sharded=3 does not divide data=4"),
    (dict(tensor=2, placement="DPX"), "DeviceMesh: placement='DPX': expected 'cluster', 'spread'"),
    (dict(tensor=0), "DeviceMesh: tensor=0: expected a positive integer"),
]


def worker():
    import torch
    import torch.distributed as dist
    import heft.torch.distributed as hdist
    import heft.torch
    from heft.torch import ProcessGroupHeft, _c10d
    from heft.torch.parallel import DeviceMesh
    hdist.init_process_group()
    rank, world = dist.get_rank(), dist.get_world_size()
    problems, checked = [], 0

    def expect(ok, what):
        nonlocal checked
        checked += 1
        if not ok:
            problems.append(what)

    for args, placement, want in CASES:
        mesh = DeviceMesh(placement=placement, **args)
        cxx = _c10d.mesh.layout(world, rank, mesh.size("data"), mesh.size("pipeline"),
                                mesh.size("tensor"), mesh.size("sharded"), placement)
        tag = f"{args} {placement} rank {rank}"
        for name, groups in want.items():
            mine = next(g for g in groups if rank in g)
            expect(mesh.groups(name) == groups, f"{tag}: {name} groups {mesh.groups(name)}")
            expect(mesh.groups(name) == cxx["groups"]["shard" if name == "sharded" else name],
                   f"{tag}: {name} groups differ from the binding's")
            expect(mesh.ranks(name) == mine, f"{tag}: {name} ranks {mesh.ranks(name)}")
            expect(mesh.size(name) == len(mine), f"{tag}: {name} size {mesh.size(name)}")
            expect(mesh.coordinate(name) == mine.index(rank) == mesh.coords[name],
                   f"{tag}: {name} coordinate {mesh.coordinate(name)}")
            pg = mesh.group(name)
            backend = heft.torch.backend_of(pg)
            expect(isinstance(backend, ProcessGroupHeft), f"{tag}: {name} backend is {type(backend)}")
            expect(dist.get_rank(pg) == mine.index(rank), f"{tag}: {name} rank in group")
            before = backend.operations()
            total = torch.tensor([rank], dtype=torch.int64)
            dist.all_reduce(total, group=pg)
            bits = torch.tensor([1 << rank], dtype=torch.int64)
            dist.all_reduce(bits, group=pg)
            expect(total.item() == sum(mine), f"{tag}: {name} sum {total.item()}, want {sum(mine)}")
            expect(bits.item() == sum(1 << q for q in mine), f"{tag}: {name} mask {bits.item()}")
            expect(backend.operations() >= before + 2, f"{tag}: {name}: heft's counter did not move")
    groups_before = len(dist.distributed_c10d._pg_map)
    for args, message in BAD:
        try:
            DeviceMesh(**args)
            problems.append(f"{args} accepted")
        except ValueError as e:
            expect(message in str(e), f"{args}: {e}")
    expect(len(dist.distributed_c10d._pg_map) == groups_before, "a refused mesh made a group")
    mesh = DeviceMesh(tensor=2)
    try:
        mesh.group("model")
        problems.append("group('model') accepted")
    except ValueError as e:
        expect("DeviceMesh.group: name='model': expected one of 'data'" in str(e), str(e))
    try:  # ranks 0, 1 ask for tensor 2, ranks 2, 3 for tensor 1: all raise, none hangs
        DeviceMesh(tensor=2 if rank < 2 else 1)
        problems.append("different meshes accepted")
    except ValueError as e:
        expect("DeviceMesh: the ranks asked for different meshes" in str(e) and
               "rank 3: data 4 x pipeline 1 x tensor 1" in str(e), str(e))
    dist.barrier()
    print("mesh " + json.dumps({"rank": rank, "checked": checked, "problems": problems}),
          flush=True)
    dist.destroy_process_group()


class Mesh(unittest.TestCase):
    def test_the_worked_example_of_the_header_through_the_binding(self):
        from heft.torch import _c10d
        tensor = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
        pipeline = [[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]]
        data = [[0, 8], [1, 9], [2, 10], [3, 11], [4, 12], [5, 13], [6, 14], [7, 15]]
        cluster = _c10d.mesh.layout(16, 13, 2, 4, 2, 0, "cluster")  # rank = d*8 + p*2 + t
        self.assertEqual(cluster["order"], "DPT")
        self.assertEqual(cluster["groups"]["tensor"], tensor)
        self.assertEqual(cluster["groups"]["pipeline"], pipeline)
        self.assertEqual(cluster["groups"]["data"], data)
        self.assertEqual(cluster["coordinates"], dict(data=1, pipeline=2, tensor=1, shard=1,
                                                      replicate=0))
        spread = _c10d.mesh.layout(16, 13, 2, 4, 2, 0, "spread")  # rank = t*8 + p*2 + d
        self.assertEqual(spread["order"], "TPD")
        self.assertEqual(spread["groups"]["tensor"], data)
        self.assertEqual(spread["groups"]["pipeline"], pipeline)
        self.assertEqual(spread["groups"]["data"], tensor)
        self.assertIn("tensor (2): {0,1} {2,3} {4,5}", cluster["describe"])
        self.assertEqual(_c10d.mesh.placement_order("PTD"), "PTD")
        self.assertIsNone(_c10d.mesh.placement_order("DPP"))

    def test_four_ranks(self):
        r = support.heft_run(["-n", "4", "--", support.PYTHON, "-u", os.path.abspath(__file__),
                              "--worker"], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        reports = [json.loads(line[line.index("mesh {") + 5:]) for line in r.stdout.splitlines()
                   if "mesh {" in line]
        self.assertEqual(sorted(x["rank"] for x in reports), [0, 1, 2, 3], r.stdout + r.stderr)
        for x in reports:
            self.assertEqual(x["problems"], [], x)
            # 10 meshes x 5 names x 10 checks, 5 bad inputs + 1 group-count + 2 others
            self.assertEqual(x["checked"], 10 * 5 * 10 + 5 + 1 + 2, x)
        print(f"4 ranks: {reports[0]['checked']} checks on each rank")

    def test_without_a_process_group(self):
        from heft.torch.parallel import DeviceMesh
        with self.assertRaises(RuntimeError) as ctx:
            DeviceMesh()
        self.assertIn("init_process_group", str(ctx.exception))


if __name__ == "__main__":
    sys.path.append(os.path.join(support.BINARY_DIR, "python"))
    if "--worker" in sys.argv:
        worker()
        sys.exit(0)
    support.main_guard()
    unittest.main(verbosity=2)
