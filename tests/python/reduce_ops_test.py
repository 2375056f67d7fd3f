# ctest-labels: multiproc
"""Every reduce op x dtype x reducing collective of the torch.distributed backend heft against
Gloo in the same processes (issue 29 item 5): at world sizes 1, 2, 3 on one host and 4 as
2 simulated hosts x 2 (shared memory inside a host, TCP across), started by `heft run`.

Each case runs on a Gloo group first. Where Gloo accepts it, heft must accept it and give
Gloo's result: bit for bit, except AVG (within the dtype's rounding; Gloo refuses AVG in
torch 1.13, so it is checked against a reference instead). Where Gloo refuses, heft either
refuses with a RuntimeError naming the op or dtype, or gives the reference result computed
here (reduce_scatter, which Gloo lacks; bfloat16, int16 and bool, which it does not reduce).
Inputs are small integers (-5..5, 0..5 for uint8): sums and products are exact in every
floating dtype, and integer products wrap modulo 2^bits as Gloo's do.

The same file is the worker: `reduce_ops_test.py worker`; rank 0 prints a line
`accepted_by_gloo=A same_as_gloo=S reference_only=R refused_by_both=B`.
"""
import functools
import os
import re
import sys
import unittest

import support

DTYPE_NAMES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32",
               "int64", "bool"]
OP_NAMES = ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
COLLECTIVES = ["all_reduce", "all_reduce_coalesced", "reduce", "reduce_scatter",
               "_reduce_scatter_base"]
# Tiny, and past the small-message paths for all_reduce; tiny and odd for the others.
SIZES = {"all_reduce": [5, 40_003]}
OTHER_SIZES = [5, 1031]


class ReduceOps(unittest.TestCase):
    def run_world(self, hosts, per_host):
        r = support.heft_run(["--hosts", str(hosts), "-n", str(per_host), "--",
                              support.PYTHON, "-u", os.path.abspath(__file__), "worker"],
                             timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        m = re.search(r"accepted_by_gloo=(\d+) same_as_gloo=(\d+) reference_only=(\d+) "
                      r"refused_by_both=(\d+)", r.stdout)
        self.assertIsNotNone(m, r.stdout + r.stderr)
        accepted, same, reference, refused = (int(m[i]) for i in range(1, 5))
        print(f"world {hosts * per_host} ({hosts} host(s)): {m[0]}")
        # Every case Gloo runs, heft ran with Gloo's result; and there are many of them.
        self.assertEqual(accepted, same)
        self.assertGreater(accepted, 200)
        self.assertGreater(reference, 100)

    def test_world_1(self):
        self.run_world(1, 1)

    def test_world_2(self):
        self.run_world(1, 2)

    def test_world_3(self):
        self.run_world(1, 3)

    def test_world_4_on_two_hosts(self):
        self.run_world(2, 2)


# ---- the worker: one rank, started by heft run ----

def worker():
    import torch
    import torch.distributed as dist
    import heft.torch.distributed as hdist

    dtypes = {n: getattr(torch, n) for n in DTYPE_NAMES}
    ops = {n: getattr(dist.ReduceOp, n) for n in OP_NAMES}
    floats = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
    hdist.init_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    heft_group = dist.distributed_c10d._get_default_group()
    gloo = dist.new_group(backend="gloo")
    counts = {"accepted_by_gloo": 0, "same_as_gloo": 0, "reference_only": 0,
              "refused_by_both": 0}

    def fail(what):
        print(f"reduce_ops_test rank {rank}: FAILED: {what}", file=sys.stderr, flush=True)
        sys.exit(1)

    def value(r, n, dtype, salt):
        g = torch.Generator().manual_seed(7919 * r + 31 * n + salt)
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool()
        low = 0 if dtype == torch.uint8 else -5
        return torch.randint(low, 6, (n,), generator=g).to(dtype)

    def reference(op, inputs, dtype):
        """op over `inputs` as the dtype's own arithmetic would (integers wrap)."""
        if dtype == torch.bool:
            a = torch.stack(inputs)
            return {"SUM": a.any(0), "MAX": a.any(0), "BOR": a.any(0), "PRODUCT": a.all(0),
                    "MIN": a.all(0), "BAND": a.all(0),
                    "BXOR": a.to(torch.int64).sum(0) % 2 == 1}.get(op)
        if op in ("BAND", "BOR", "BXOR"):
            f = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[op]
            return functools.reduce(f, inputs)
        wide = torch.stack([t.to(torch.float64 if dtype in floats else torch.int64)
                            for t in inputs])
        out = {"SUM": lambda: wide.sum(0), "PRODUCT": lambda: wide.prod(0),
               "MIN": lambda: wide.min(0).values, "MAX": lambda: wide.max(0).values,
               "AVG": lambda: wide.to(torch.float64).sum(0) / len(inputs)}[op]()
        return out.to(dtype)  # int64 -> int8/uint8/int16/int32 wraps, as the dtype would

    def run(collective, group, op, dtype, n, salt):
        """This rank's result of `collective` on `group` (None where a rank keeps nothing)."""
        mine = value(rank, n, dtype, salt)
        if collective == "all_reduce":
            t = mine.clone()
            dist.all_reduce(t, op=op, group=group)
            return t
        if collective == "all_reduce_coalesced":
            parts = [mine.clone(), value(rank, 3, dtype, salt + 1)]
            dist.all_reduce_coalesced(parts, op=op, group=group)
            return torch.cat(parts)
        if collective == "reduce":
            t = mine.clone()
            root = salt % world
            dist.reduce(t, dst=root, op=op, group=group)
            return t if rank == root else None
        blocks = [value(rank, n, dtype, salt + 10 + j) for j in range(world)]
        out = torch.empty(n, dtype=dtype)
        if collective == "reduce_scatter":
            dist.reduce_scatter(out, blocks, op=op, group=group)
        else:
            dist._reduce_scatter_base(out, torch.cat(blocks), op=op, group=group)
        return out

    def expected(collective, op_name, dtype, n, salt):
        if collective in ("reduce_scatter", "_reduce_scatter_base"):
            return reference(op_name, [value(r, n, dtype, salt + 10 + rank) for r in range(world)],
                             dtype)
        if collective == "reduce" and rank != salt % world:
            return None
        want = reference(op_name, [value(r, n, dtype, salt) for r in range(world)], dtype)
        if collective == "all_reduce_coalesced":
            more = reference(op_name, [value(r, 3, dtype, salt + 1) for r in range(world)], dtype)
            want = None if want is None or more is None else torch.cat([want, more])
        return want

    def equal(a, b, approx):
        if a is None or b is None:
            return a is None and b is None
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if approx:
            return torch.allclose(a.to(torch.float64), b.to(torch.float64), rtol=1e-2, atol=1e-2)
        return torch.equal(a, b)

    salt = 0
    for collective in COLLECTIVES:
        for op_name in OP_NAMES:
            for dtype_name in DTYPE_NAMES:
                dtype, op = dtypes[dtype_name], ops[op_name]
                for n in SIZES.get(collective, OTHER_SIZES):
                    salt += 1
                    what = f"{collective} {op_name} {dtype_name} n={n}"
                    try:
                        by_gloo = run(collective, gloo, op, dtype, n, salt)
                        gloo_ok = True
                    except (RuntimeError, ValueError):
                        gloo_ok = False
                    try:
                        by_heft = run(collective, heft_group, op, dtype, n, salt)
                    except RuntimeError as e:
                        if gloo_ok:
                            fail(f"{what}: Gloo runs it, heft refused: {e}")
                        text = str(e)
                        if op_name not in text and dtype_name not in text and "Bool" not in text:
                            fail(f"{what}: refused without naming the op or dtype: {text}")
                        counts["refused_by_both"] += 1
                        continue
                    approx = op_name == "AVG"
                    if gloo_ok:
                        counts["accepted_by_gloo"] += 1
                        if not equal(by_heft, by_gloo, approx):
                            fail(f"{what}: heft {by_heft} but Gloo {by_gloo}")
                        counts["same_as_gloo"] += 1
                    want = expected(collective, op_name, dtype, n, salt)
                    if want is None and by_heft is not None:
                        fail(f"{what}: no reference for a result heft gave")
                    if not equal(by_heft, want, approx):
                        fail(f"{what}: heft {by_heft} but the reference {want}")
                    if not gloo_ok:
                        counts["reference_only"] += 1
    hdist.barrier()
    if rank == 0:
        print(" ".join(f"{k}={v}" for k, v in counts.items()), flush=True)
    hdist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:] == ["worker"]:
        worker()
        sys.exit(0)
    support.main_guard()
    unittest.main(verbosity=2)
