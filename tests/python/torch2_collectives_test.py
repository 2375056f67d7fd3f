# ctest-labels: multiproc
"""The collectives torch 2 sends a backend, on heft against Gloo in the same processes:
all_gather_into_tensor and reduce_scatter_tensor (alone, coalesced by torch's coalescing
manager, and as functional collectives), all_to_all_single with equal and unequal splits,
all_to_all, gather, scatter, broadcast, all_gather, the object collectives,
batch_isend_irecv (coalesced point to point), subgroups (new_group, new_subgroups) and
init_device_mesh("cpu", ...) meshes; every dtype Gloo accepts. World sizes 1-4 on one host
and 4 as 2 simulated hosts x 2, started by `heft run`; and the init methods torch users pass
(env://, tcp://, file://) at world 2 with ranks started by hand.

Each case runs on a Gloo group first. Where Gloo accepts it, heft must give the same bits;
where Gloo refuses, heft must give the reference computed here or refuse with a RuntimeError.
What heft does not support fails naming itself: recv from any source, PREMUL_SUM.

The same file is the worker: `torch2_collectives_test.py worker [INIT_METHOD]`; rank 0 prints
`same_as_gloo=S refused_by_gloo=R unsupported_named=U`.
"""
import os
import re
import sys
import tempfile
import unittest

import support


class Torch2Collectives(unittest.TestCase):
    def check(self, out, world):
        m = re.search(r"same_as_gloo=(\d+) refused_by_gloo=(\d+) unsupported_named=(\d+)", out)
        self.assertIsNotNone(m, out)
        print(f"world {world}: {m[0]}")
        self.assertGreater(int(m[1]), 60)
        self.assertEqual(int(m[3]), 2)

    def run_world(self, hosts, per_host):
        r = support.heft_run(["--hosts", str(hosts), "-n", str(per_host), "--", support.PYTHON,
                              "-u", os.path.abspath(__file__), "worker"], timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.check(r.stdout, hosts * per_host)

    def test_world_1(self):
        self.run_world(1, 1)

    def test_world_2(self):
        self.run_world(1, 2)

    def test_world_3(self):
        self.run_world(1, 3)

    def test_world_4(self):
        self.run_world(1, 4)

    def test_world_4_on_two_hosts(self):
        self.run_world(2, 2)

    def test_init_methods(self):
        with tempfile.TemporaryDirectory() as d:
            for method in ["env://", f"tcp://127.0.0.1:{support.free_port()}",
                           f"file://{d}/rendezvous"]:
                results = support.run_ranks(2, [support.PYTHON, "-u", os.path.abspath(__file__),
                                                "worker", method], timeout=300)
                self.assertTrue(all(rc == 0 for rc, _, _ in results),
                                method + "\n" + support.describe(results))
                self.check(results[0][1], f"2 ({method})")


# ---- the worker: one rank ----

def worker(init_method):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.distributed.device_mesh import init_device_mesh
    import heft.torch

    torch.set_num_threads(1)
    if init_method:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("heft", init_method=init_method, rank=rank, world_size=world)
    else:
        dist.init_process_group("heft")  # env://, as heft run and torchrun set it
    world, rank = dist.get_world_size(), dist.get_rank()
    heft_world = dist.group.WORLD
    gloo_world = dist.new_group(backend="gloo")
    counts = {"same_as_gloo": 0, "refused_by_gloo": 0, "unsupported_named": 0}

    def fail(what):
        print(f"torch2_collectives_test rank {rank}: FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)

    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]

    def value(r, n, dtype, salt):
        g = torch.Generator().manual_seed(7919 * r + 31 * n + salt)
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool()
        return torch.randint(0 if dtype == torch.uint8 else -5, 6, (n,), generator=g).to(dtype)

    def same(name, case, reference=None):
        """Runs case(group) on Gloo, then on heft; their results must be the same bits."""
        try:
            want = case(gloo_world, "gloo")
        except (RuntimeError, ValueError, NotImplementedError):
            want = None
        if want is None:
            counts["refused_by_gloo"] += 1
            try:
                got = case(heft_world, "heft")
            except (RuntimeError, ValueError, NotImplementedError):
                return
            if reference is not None and not equal(got, reference()):
                fail(f"{name}: Gloo refuses it, and heft's result is not the reference")
            return
        got = case(heft_world, "heft")
        if not equal(got, want):
            fail(f"{name}: heft {got} != gloo {want}")
        counts["same_as_gloo"] += 1

    def equal(a, b):
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
        return a == b

    for dtype in dtypes:
        n = 7
        mine = value(rank, n, dtype, 1)
        gathered_ref = torch.cat([value(r, n, dtype, 1) for r in range(world)])

        def all_gather_into_tensor(group, _):
            out = torch.empty(world * n, dtype=dtype)
            dist.all_gather_into_tensor(out, mine, group=group)
            return out
        same(f"all_gather_into_tensor {dtype}", all_gather_into_tensor, lambda: gathered_ref)

        def all_gather_coalesced(group, _):
            outs = [torch.empty(world * n, dtype=dtype), torch.empty(world * 3, dtype=dtype)]
            ins = [mine, value(rank, 3, dtype, 2)]
            with dist._coalescing_manager(group=group, async_ops=True) as cm:
                for o, i in zip(outs, ins):
                    dist.all_gather_into_tensor(o, i, group=group)
            cm.wait()
            return outs
        same(f"coalesced all_gather_into_tensor {dtype}", all_gather_coalesced)

        def all_gather_list(group, _):
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            dist.all_gather(outs, mine, group=group)
            return outs
        same(f"all_gather {dtype}", all_gather_list)

        def broadcast(group, _):
            t = mine.clone()
            dist.broadcast(t, src=world - 1, group=group)
            return t
        same(f"broadcast {dtype}", broadcast)

        def gather(group, _):
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == 0 else None
            dist.gather(mine, outs, dst=0, group=group)
            return outs
        same(f"gather {dtype}", gather)

        def scatter(group, _):
            out = torch.empty(n, dtype=dtype)
            ins = [value(r, n, dtype, 3) for r in range(world)] if rank == world - 1 else None
            dist.scatter(out, ins, src=world - 1, group=group)
            return out
        same(f"scatter {dtype}", scatter)

        def all_to_all_single_equal(group, _):
            inp = value(rank, world * 2, dtype, 4)
            out = torch.empty(world * 2, dtype=dtype)
            dist.all_to_all_single(out, inp, group=group)
            return out
        same(f"all_to_all_single equal {dtype}", all_to_all_single_equal)

        def all_to_all_single_unequal(group, _):
            # rank r sends (r + j + 1) elements to rank j
            send = [rank + j + 1 for j in range(world)]
            recv = [j + rank + 1 for j in range(world)]
            inp = value(rank, sum(send), dtype, 5)
            out = torch.empty(sum(recv), dtype=dtype)
            dist.all_to_all_single(out, inp, recv, send, group=group)
            return out
        same(f"all_to_all_single unequal {dtype}", all_to_all_single_unequal)

        def all_to_all(group, _):
            ins = [value(rank, j + 1, dtype, 6 + j) for j in range(world)]
            outs = [torch.empty(rank + 1, dtype=dtype) for _ in range(world)]
            dist.all_to_all(outs, ins, group=group)
            return outs
        same(f"all_to_all {dtype}", all_to_all)

        if dtype != torch.bool:
            def reduce_scatter_tensor(group, _):
                inp = value(rank, world * n, dtype, 7)
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, inp, group=group)
                return out
            same(f"reduce_scatter_tensor {dtype}", reduce_scatter_tensor)

            def reduce_scatter_coalesced(group, _):
                ins = [value(rank, world * n, dtype, 8), value(rank, world * 2, dtype, 9)]
                outs = [torch.empty(n, dtype=dtype), torch.empty(2, dtype=dtype)]
                with dist._coalescing_manager(group=group, async_ops=True) as cm:
                    for o, i in zip(outs, ins):
                        dist.reduce_scatter_tensor(o, i, group=group)
                cm.wait()
                return outs
            same(f"coalesced reduce_scatter_tensor {dtype}", reduce_scatter_coalesced)

    # Functional collectives (DTensor's and compiled code's path), float32.
    x = value(rank, 12, torch.float32, 10)
    same("functional all_reduce", lambda g, _: funcol.all_reduce(x, "sum", g).wait())
    same("functional all_gather_tensor", lambda g, _: funcol.all_gather_tensor(x, 0, g).wait())
    same("functional reduce_scatter_tensor",
         lambda g, _: funcol.reduce_scatter_tensor(value(rank, 4 * world, torch.float32, 11),
                                                   "sum", 0, g).wait())
    same("functional all_to_all_single",
         lambda g, _: funcol.all_to_all_single(value(rank, 2 * world, torch.float32, 12),
                                               None, None, g).wait())

    # Objects.
    def objects(group, _):
        out = [None] * world
        dist.all_gather_object(out, {"rank": rank, "text": "x" * rank}, group=group)
        lst = [rank * 10, "a"] if rank == 0 else [None, None]
        dist.broadcast_object_list(lst, src=0, group=group)
        return out + lst
    same("object collectives", objects)

    # batch_isend_irecv: a ring, coalesced by torch.
    def ring(group, _):
        if world == 1:
            return []
        send = value(rank, 9, torch.float32, 13)
        recv = torch.empty(9)
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % world, group),
               dist.P2POp(dist.irecv, recv, (rank - 1) % world, group)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return recv
    same("batch_isend_irecv ring", ring)

    # Subgroups: new_group of the even ranks, new_subgroups of size 2 (where world divides).
    evens = list(range(0, world, 2))
    heft_evens, gloo_evens = dist.new_group(evens), dist.new_group(evens, backend="gloo")
    if rank in evens:
        def evens_sum(group, name):
            t = value(rank, 5, torch.float64, 14)
            dist.all_reduce(t, group=heft_evens if name == "heft" else gloo_evens)
            return t
        same("new_group all_reduce", evens_sum)
    if world % 2 == 0:
        heft_sub, _ = dist.new_subgroups(group_size=2)
        gloo_sub, _ = dist.new_subgroups(group_size=2, backend="gloo")

        def pairs_sum(group, name):
            t = value(rank, 5, torch.float32, 15)
            dist.all_reduce(t, group=heft_sub if name == "heft" else gloo_sub)
            return t
        same("new_subgroups all_reduce", pairs_sum)
        if heft.torch.backend_of(heft_sub).operations() < 1:
            fail("new_subgroups' group did not run on heft")
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        for dim in ("dp", "tp"):
            t = torch.full((3,), float(rank))
            dist.all_reduce(t, group=mesh.get_group(dim))
            ranks = dist.get_process_group_ranks(mesh.get_group(dim))
            if not torch.equal(t, torch.full((3,), float(sum(ranks)))):
                fail(f"device mesh {dim}: {t} != sum of {ranks}")
            if dist.get_backend(mesh.get_group(dim)) != "heft":
                fail(f"device mesh {dim}: backend {dist.get_backend(mesh.get_group(dim))}")
            heft.torch.backend_of(mesh.get_group(dim))  # raises unless heft's

    # What heft does not support fails naming itself.
    if world > 1:
        try:
            if rank == 0:
                dist.recv(torch.empty(1))
            counts["unsupported_named"] += 1  # other ranks: nothing to do
        except RuntimeError as e:
            if "any source" not in str(e):
                fail(f"recv from any source: {e}")
            counts["unsupported_named"] += 1
    else:
        counts["unsupported_named"] += 1
    try:
        dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))
        fail("PREMUL_SUM ran")
    except (RuntimeError, ValueError) as e:
        if "PREMUL_SUM" not in str(e).upper().replace(" ", "_"):
            fail(f"PREMUL_SUM's error does not name it: {e}")
        counts["unsupported_named"] += 1

    dist.barrier()
    if rank == 0:
        print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        support.main_guard()
        unittest.main()
