"""One rank of tests/python/collectives_test.py, started by `heft run -n W`.

Joins the default group with backend heft through heft's own store
(heft.torch.distributed.init_process_group()), makes a Gloo group over the same ranks, and
runs every operation of the backend on both with the same inputs, for every dtype and
reduce op: the heft result must equal Gloo's where Gloo runs the case, and the reference
computed here from every rank's inputs (which each rank can rebuild: they are a function
of the rank) in every case. Inputs are small integers, so sums are exact in every dtype
and SUM/MIN/MAX compare exactly; AVG compares within the dtype's rounding.
Also: subgroups through new_group, non-contiguous tensors, send/recv with tags, that the
heft path ran (the group's operation counter and its last allreduce path), that synchronous
all_reduces ran on their caller's thread, and that an async one nobody touches still runs.
Exits 0 when every check holds; prints a summary line `checked=N gloo_compared=G`.
Leaves out: failures and bad input (failure_worker.py), DDP (ddp_worker.py).
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

import heft.torch
import heft.torch.distributed as hdist

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
FLOATS = {torch.float32, torch.float64, torch.float16, torch.bfloat16}
OPS = {"SUM": dist.ReduceOp.SUM, "MIN": dist.ReduceOp.MIN, "MAX": dist.ReduceOp.MAX,
       "AVG": dist.ReduceOp.AVG}
# Sizes: odd and tiny (chunking), and past heft's small-message path (slots, ring).
SIZES = [1, 7, 40_003]

checked = 0
gloo_compared = 0
large_paths = set()  # heft's allreduce paths at the largest size


def fail(what):
    print(f"collectives_worker rank {dist.get_rank()}: FAILED: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def value(rank, n, dtype, salt=0):
    """Rank `rank`'s input: small integers (exact in every dtype, no int8 overflow)."""
    g = torch.Generator().manual_seed(1000 * rank + 17 * n + salt)
    low, high = (0, 6) if dtype == torch.uint8 else (-5, 6)
    return torch.randint(low, high, (n,), generator=g).to(dtype)


def reference(op, inputs, dtype):
    stack = torch.stack([t.to(torch.float64) for t in inputs])
    if op == "SUM":
        out = stack.sum(0)
    elif op == "MIN":
        out = stack.min(0).values
    elif op == "MAX":
        out = stack.max(0).values
    else:
        out = stack.sum(0) / len(inputs)
    return out.to(dtype)


def same(a, b, what, approx=False):
    global checked
    checked += 1
    if a.dtype != b.dtype or a.shape != b.shape:
        fail(f"{what}: {a.dtype}{tuple(a.shape)} against {b.dtype}{tuple(b.shape)}")
    if approx:
        ok = torch.allclose(a.to(torch.float64), b.to(torch.float64), rtol=1e-2, atol=1e-2)
    else:
        ok = torch.equal(a, b)
    if not ok:
        diff = (a.to(torch.float64) - b.to(torch.float64)).abs().max().item()
        fail(f"{what}: results differ, largest difference {diff}")


def gloo_or_none(fn):
    """Gloo's result, or None where Gloo does not run the case (a dtype or an op it lacks)."""
    global gloo_compared
    try:
        out = fn()
    except (RuntimeError, ValueError):
        return None
    gloo_compared += 1
    return out


def check_all_reduce(heft_group, gloo_group, world, rank, ranks):
    for dtype in DTYPES:
        for op_name, op in OPS.items():
            if op_name == "AVG" and dtype not in FLOATS:
                continue
            for n in SIZES:
                what = f"all_reduce {op_name} {dtype} n={n}"
                inputs = [value(r, n, dtype) for r in ranks]
                want = reference(op_name, inputs, dtype)
                got = inputs[rank].clone()
                dist.all_reduce(got, op=op, group=heft_group)
                same(got, want, what, approx=op_name == "AVG")
                if n == SIZES[-1] and world > 1:
                    large_paths.add(heft.torch.backend_of(heft_group).last_allreduce_path())

                def run_gloo():
                    t = inputs[rank].clone()
                    dist.all_reduce(t, op=op, group=gloo_group)
                    return t
                g = gloo_or_none(run_gloo) if gloo_group is not None else None
                if g is not None:
                    same(got, g, what + " against gloo", approx=op_name == "AVG")
    # bool: MIN is a logical and, MAX a logical or.
    flags = [value(r, 9, torch.int32) > 0 for r in ranks]
    got = flags[rank].clone()
    dist.all_reduce(got, op=dist.ReduceOp.MAX, group=heft_group)
    same(got, torch.stack(flags).any(0), "all_reduce MAX bool")
    # Non-contiguous: the transpose of a 2-D tensor, written back in place.
    base = [value(r, 12, torch.float32).view(3, 4) for r in ranks]
    got = base[rank].clone().t()
    dist.all_reduce(got, group=heft_group)
    same(got, torch.stack(base).sum(0).t(), "all_reduce of a transposed tensor")
    # coalesced
    parts = [[value(r, 5, torch.float32, 1), value(r, 3, torch.float32, 2)] for r in ranks]
    got = [p.clone() for p in parts[rank]]
    dist.all_reduce_coalesced(got, group=heft_group)
    for i in range(2):
        same(got[i], torch.stack([p[i] for p in parts]).sum(0), f"all_reduce_coalesced part {i}")


def check_rooted(heft_group, gloo_group, world, rank, ranks):
    for dtype in DTYPES:
        for root in sorted({0, world - 1}):
            inputs = [value(r, 11, dtype) for r in ranks]
            got = inputs[rank].clone()
            dist.broadcast(got, src=ranks[root], group=heft_group)
            same(got, inputs[root], f"broadcast {dtype} root {root}")
            got = inputs[rank].clone()
            dist.reduce(got, dst=ranks[root], op=dist.ReduceOp.SUM, group=heft_group)
            if rank == root:
                same(got, reference("SUM", inputs, dtype), f"reduce {dtype} root {root}")

                def run_gloo():
                    t = inputs[rank].clone()
                    dist.reduce(t, dst=ranks[root], group=gloo_group)
                    return t
            else:
                same(got, inputs[rank], f"reduce {dtype} leaves a non-root's tensor alone")

                def run_gloo():
                    t = inputs[rank].clone()
                    dist.reduce(t, dst=ranks[root], group=gloo_group)
                    return None
            g = gloo_or_none(run_gloo)
            if g is not None:
                same(got, g, f"reduce {dtype} root {root} against gloo")
            # gather and scatter
            gathered = [torch.empty_like(inputs[rank]) for _ in ranks] if rank == root else None
            dist.gather(inputs[rank], gather_list=gathered, dst=ranks[root], group=heft_group)
            if rank == root:
                for r in range(world):
                    same(gathered[r], inputs[r], f"gather {dtype} root {root} block {r}")
            blocks = [value(r, 6, dtype, 3) for r in ranks]
            out = torch.empty_like(blocks[rank])
            dist.scatter(out, scatter_list=blocks if rank == root else None, src=ranks[root],
                         group=heft_group)
            same(out, blocks[rank], f"scatter {dtype} root {root}")


def check_gathers(heft_group, gloo_group, world, rank, ranks):
    for dtype in DTYPES:
        inputs = [value(r, 9, dtype) for r in ranks]
        outs = [torch.empty_like(inputs[rank]) for _ in ranks]
        dist.all_gather(outs, inputs[rank], group=heft_group)
        for r in range(world):
            same(outs[r], inputs[r], f"all_gather {dtype} block {r}")

        def run_gloo():
            o = [torch.empty_like(inputs[rank]) for _ in ranks]
            dist.all_gather(o, inputs[rank], group=gloo_group)
            return torch.cat(o)
        g = gloo_or_none(run_gloo)
        if g is not None:
            same(torch.cat(outs), g, f"all_gather {dtype} against gloo")
        flat = torch.empty(9 * world, dtype=dtype)
        dist._all_gather_base(flat, inputs[rank], group=heft_group)
        same(flat, torch.cat(inputs), f"_all_gather_base {dtype}")
        # reduce_scatter: rank r gets block r of the sum of every rank's list.
        lists = [[value(r, 4, dtype, 10 + j) for j in range(world)] for r in ranks]
        out = torch.empty(4, dtype=dtype)
        dist.reduce_scatter(out, [t.clone() for t in lists[rank]], group=heft_group)
        same(out, reference("SUM", [lists[r][rank] for r in range(world)], dtype),
             f"reduce_scatter {dtype}")
        out = torch.empty(4, dtype=dtype)
        dist._reduce_scatter_base(out, torch.cat(lists[rank]), group=heft_group)
        same(out, reference("SUM", [lists[r][rank] for r in range(world)], dtype),
             f"_reduce_scatter_base {dtype}")
        # all_to_all: rank r's block j goes to rank j's block r.
        outs = [torch.empty(4, dtype=dtype) for _ in ranks]
        dist.all_to_all(outs, [t.clone() for t in lists[rank]], group=heft_group)
        for r in range(world):
            same(outs[r], lists[r][rank], f"all_to_all {dtype} block {r}")
        single = torch.empty(4 * world, dtype=dtype)
        dist.all_to_all_single(single, torch.cat(lists[rank]), group=heft_group)
        same(single, torch.cat([lists[r][rank] for r in range(world)]),
             f"all_to_all_single {dtype}")

        def run_gloo_a2a():
            o = torch.empty(4 * world, dtype=dtype)
            dist.all_to_all_single(o, torch.cat(lists[rank]), group=gloo_group)
            return o
        g = gloo_or_none(run_gloo_a2a)
        if g is not None:
            same(single, g, f"all_to_all_single {dtype} against gloo")
    # all_to_all_single with uneven splits: rank r sends r + j + 1 rows to rank j.
    rows = lambda src, dst: src + dst + 1  # noqa: E731
    send = torch.cat([torch.full((rows(rank, j), 2), float(100 * rank + j)) for j in range(world)])
    recv = torch.empty(sum(rows(j, rank) for j in range(world)), 2)
    dist.all_to_all_single(recv, send, output_split_sizes=[rows(j, rank) for j in range(world)],
                           input_split_sizes=[rows(rank, j) for j in range(world)],
                           group=heft_group)
    want = torch.cat([torch.full((rows(j, rank), 2), float(100 * j + rank)) for j in range(world)])
    same(recv, want, "all_to_all_single with uneven splits")
    # all_gather_coalesced
    parts = [[value(r, 3, torch.float32, 4), value(r, 2, torch.float32, 5)] for r in ranks]
    outs = [[torch.empty(3), torch.empty(2)] for _ in ranks]
    dist.all_gather_coalesced(outs, parts[rank], group=heft_group)
    for r in range(world):
        for i in range(2):
            same(outs[r][i], parts[r][i], f"all_gather_coalesced rank {r} part {i}")


def check_point_to_point(world, rank):
    if world == 1:
        return
    right, left = (rank + 1) % world, (rank - 1) % world
    for tag in (0, 7):
        out = torch.full((5,), float(rank * 10 + tag))
        got = torch.empty(5)
        reqs = [dist.isend(out, right, tag=tag), dist.irecv(got, left, tag=tag)]
        for r in reqs:
            r.wait()
        same(got, torch.full((5,), float(left * 10 + tag)), f"isend/irecv tag {tag}")
    # blocking send/recv: even ranks send first.
    if rank % 2 == 0:
        if rank + 1 < world:
            dist.send(torch.arange(4, dtype=torch.int64) + rank, rank + 1, tag=3)
    else:
        got = torch.empty(4, dtype=torch.int64)
        dist.recv(got, rank - 1, tag=3)
        same(got, torch.arange(4, dtype=torch.int64) + rank - 1, "send/recv")


def check_untouched_work(world, rank):
    """An async all_reduce that its caller neither waits on, polls nor follows with another
    operation of the group is still issued (the completion thread's tick): rank 0 holds its
    Work and waits in the store for rank 1, whose synchronous all_reduce can only finish once
    rank 0's was issued. A lost tick is a hang, ended by the store's 60 s wait."""
    if world == 1:
        return
    store = dist.distributed_c10d._get_default_store()
    x = torch.full((4,), float(rank))
    group = heft.torch.backend_of()  # the default group's heft backend: its counters
    if rank == 0:
        work = dist.all_reduce(x, async_op=True)
        store.wait(["untouched_work_done"], datetime.timedelta(seconds=60))
        work.wait()
    else:
        dist.all_reduce(x)
        if rank == 1:
            store.set("untouched_work_done", "1")
    same(x, torch.full((4,), float(sum(range(world)))), "an all_reduce nobody touched for a while")
    # Its caller went on without waiting: rank 0's next operations are issued at once.
    at_once = group.completions()[4]
    y = torch.ones(4)
    dist.all_reduce(y)
    same(y, torch.full((4,), float(world)), "an all_reduce after one nobody touched")
    if rank == 0 and group.completions()[4] != at_once + 1:
        fail("after an operation held until the tick, the next one was not issued at once")


def check_subgroups(world, rank):
    """new_group through the same backend: evens and odds, each its own communicator."""
    evens = list(range(0, world, 2))
    odds = list(range(1, world, 2))
    groups = {"evens": dist.new_group(evens, backend="heft")}
    if odds:
        groups["odds"] = dist.new_group(odds, backend="heft")
    mine = evens if rank % 2 == 0 else odds
    group = groups["evens" if rank % 2 == 0 else "odds"]
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=group)
    same(x, torch.tensor([float(sum(mine))]), f"all_reduce in the subgroup {mine}")
    if dist.get_world_size(group) != len(mine):
        fail(f"subgroup size {dist.get_world_size(group)}, expected {len(mine)}")
    check_all_reduce(group, None, len(mine), mine.index(rank), mine)


def comm_thread_wakeups():
    """Times the communicator threads of this process (named heft-comm) went to sleep."""
    n = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() != "heft-comm":
                    continue
            with open(f"/proc/self/task/{task}/status") as f:
                n += sum(int(l.split()[1]) for l in f if l.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:  # a thread that ended meanwhile
            pass
    return n


def check_quiet_comm_thread(group, rank):
    """A synchronous call run inline on the caller's thread wakes nobody: the communicator's
    thread sleeps through it (it used to be woken after every inline call, a futex wake and
    a context switch per all_reduce). Only calls the completion thread issued (their caller
    descheduled for over a tick) go through the thread's queue and may wake it."""
    x = torch.ones(16)
    calls = 300
    before, (_, _, on_caller_before, _, _) = comm_thread_wakeups(), group.completions()
    ops_before = group.operations()
    for _ in range(calls):
        dist.all_reduce(x, group=group)
    wakeups = comm_thread_wakeups() - before
    queued = (group.operations() - ops_before) - (group.completions()[2] - on_caller_before)
    if wakeups > 2 * queued + 10:
        fail(f"the communicator's thread woke {wakeups} times in {calls} synchronous "
             f"all_reduces ({queued} of them queued): inline calls should not wake it")
    if rank == 0:
        print(f"communicator thread wake-ups in {calls} synchronous all_reduces: {wakeups} "
              f"({queued} queued)", flush=True)


def check_reused_operations(group, rank):
    """A synchronous all_reduce takes its operation from the group's pool (returned by the
    previous call's Work): the backend allocates nothing per call. One the completion thread
    issued instead (its caller descheduled for over a tick) is held a while longer and not
    reused at once: so most, not all."""
    x = torch.ones(16)
    calls = 200
    before = group.reused_operations()
    for _ in range(calls):
        dist.all_reduce(x, group=group)
    reused = group.reused_operations() - before
    if reused * 2 < calls:
        fail(f"only {reused} of {calls} synchronous all_reduces reused an operation "
             f"(expected most: the previous call's operation comes back to the pool)")
    if rank == 0:
        print(f"operations reused in {calls} synchronous all_reduces: {reused}", flush=True)


def check_shm_waits(group, rank):
    """shm_waits() reads this rank's shared-memory synchronisations and how its waits ended
    (bench/python_allreduce.py --waits prints them): they count the group's own all_reduces
    (at least one sync each where the ranks share memory; none alone)."""
    keys = ("syncs", "spun", "yielded", "slept", "contended")
    before = group.shm_waits()
    if sorted(before) != sorted(keys):
        fail(f"shm_waits() keys {sorted(before)}, expected {sorted(keys)}")
    x = torch.ones(16 << 10)
    calls = 50
    for _ in range(calls):
        dist.all_reduce(x, group=group)
    d = {k: v - before[k] for k, v in group.shm_waits().items()}
    shared = group.has_shared_memory()
    if shared and d["syncs"] < calls or not shared and d["syncs"] != 0:
        fail(f"{d['syncs']} shared-memory syncs in {calls} all_reduces (shared memory: {shared})")
    if min(d.values()) < 0:
        fail(f"shm_waits() went backwards: {d}")
    if rank == 0:
        print(f"shared-memory waits in {calls} all_reduces of 64 KiB: {d}", flush=True)


def check_shm_placement(group, world, rank):
    """shm_placement() reads this rank's placement probes (docs/comm.md, near and far): 2
    ranks on one host probe once in any 8 direct all_reduces of 256 KiB; elsewhere (3 ranks,
    a hierarchical call's host step, no shared memory) nothing is measured."""
    keys = ("probes", "unanswered", "probe_ns", "far", "direct")
    before = group.shm_placement()
    if sorted(before) != sorted(keys):
        fail(f"shm_placement() keys {sorted(before)}, expected {sorted(keys)}")
    for _ in range(9):  # a probe at the first call of a group, then after 8 calls
        dist.all_reduce(torch.ones(64 << 10), group=group)
    d = {k: v - before[k] for k, v in group.shm_placement().items() if k != "probe_ns"}
    flat = group.last_allreduce_path() == "shm/direct"
    measured = flat and world == 2
    if flat and d["direct"] != 9:
        fail(f"{d['direct']} direct all_reduces of 9 counted: {d}")
    if measured and not 1 <= d["probes"] <= 2 or not measured and d["probes"] != 0:
        fail(f"{d['probes']} placement probes in 9 all_reduces on {world} ranks: {d}")
    if d["unanswered"] > d["probes"] or d["far"] > d["direct"]:
        fail(f"shm_placement() counts out of order: {d}")
    if rank == 0:
        print(f"placement probes in 9 all_reduces of 256 KiB: {d}", flush=True)


def check_bench_allreduce(group, world, rank):
    """bench_allreduce() (bench/python_allreduce.py --paired) runs heft's own C++ allreduce
    in place, `iters` times, through the group's communicator, not through torch: the sums
    compound (world ** iters), the group's operation count stays, and the time is a call's."""
    before = group.operations()
    x = torch.full((3000,), float(rank + 1) / (world * (world + 1) / 2))
    seconds = group.bench_allreduce(x, 3)
    if not 0 < seconds < 60:
        fail(f"bench_allreduce returned {seconds} s a call")
    if not torch.allclose(x, torch.full_like(x, float(world * world)), rtol=1e-5):
        fail(f"bench_allreduce: 3 sums gave {x[:3].tolist()}..., expected {world * world}")
    if group.operations() != before:
        fail("bench_allreduce went through the process group's operations")
    for bad, what in ((torch.ones(4, dtype=torch.float64), "Double"),
                      (torch.ones(4, 2).t(), "not contiguous")):
        try:
            group.bench_allreduce(bad, 1)
        except RuntimeError as e:
            if what not in str(e):
                fail(f"bench_allreduce's error does not say {what!r}: {e}")
        else:
            fail(f"bench_allreduce took a tensor it cannot time ({what})")


def main():
    hdist.init_process_group()
    world, rank = dist.get_world_size(), dist.get_rank()
    ranks = list(range(world))
    heft_group = dist.distributed_c10d._get_default_group()
    backend = heft.torch.backend_of(heft_group)  # its heft backend: counters and probes
    if not isinstance(backend, heft.torch.ProcessGroupHeft):
        fail(f"the default group's backend is {type(backend).__name__}, not heft's")
    gloo_group = dist.new_group(backend="gloo")
    before = backend.operations()
    by_waiter_before, _, on_caller_before, _, _ = backend.completions()
    check_all_reduce(heft_group, gloo_group, world, rank, ranks)
    # Synchronous calls: the operation waits, not issued, until its caller's wait(), which
    # runs it with the communicator's blocking form on the caller's thread (inline: the
    # communicator is idle) and completes it there, with no hand-off to another thread.
    # Gloo's calls in between do not touch heft's group, so every heft all_reduce should
    # take that path; one whose caller was descheduled for over a tick (1-2 ms) between the
    # call and its wait() is issued by the completion thread instead: so most, not all.
    by_waiter_after, _, on_caller_after, _, _ = backend.completions()
    by_waiter = by_waiter_after - by_waiter_before
    on_caller = on_caller_after - on_caller_before
    issued = backend.operations() - before
    if by_waiter == 0 or on_caller * 2 < issued:
        fail(f"of {issued} synchronous all_reduces, {by_waiter} were completed by their waiter "
             f"and only {on_caller} ran on the caller's thread (expected most)")
    if rank == 0:
        print(f"completed by the waiter: {by_waiter} of {issued}, on the caller's thread: "
              f"{on_caller}", flush=True)
    path = backend.last_allreduce_path()
    check_quiet_comm_thread(backend, rank)
    check_reused_operations(backend, rank)
    check_shm_waits(backend, rank)
    check_shm_placement(backend, world, rank)
    check_bench_allreduce(backend, world, rank)
    check_rooted(heft_group, gloo_group, world, rank, ranks)
    check_gathers(heft_group, gloo_group, world, rank, ranks)
    check_point_to_point(world, rank)
    check_untouched_work(world, rank)
    hdist.barrier()
    ran = backend.operations() - before
    if ran < checked // 2:
        fail(f"only {ran} operations went through heft for {checked} checks")
    if world > 1 and not path:
        fail("heft's last allreduce path is empty: no allreduce ran through heft's communicator")
    check_subgroups(world, rank)
    hdist.barrier()
    if rank == 0:
        print(f"world={world} checked={checked} gloo_compared={gloo_compared} "
              f"heft_operations={ran} last_allreduce_path={path or 'none'} "
              f"large_paths={','.join(sorted(large_paths)) or 'none'}", flush=True)
    hdist.destroy_process_group()


if __name__ == "__main__":
    main()
