"""One rank of tests/python/failure_test.py, started by that test with RANK, WORLD_SIZE and
PYTHONPATH=build/python (no launcher: a launcher would stop the group when one rank dies,
and these cases are about what the survivors see).

    failure_worker.py init URL         join through torch's init method URL (env://, tcp://,
                                       file://), all_reduce the ranks, print `sum=S`
    failure_worker.py peer_lost URL    the last rank kills itself in the middle of a large
                                       all_reduce; the others must raise a RuntimeError naming
                                       it: they print `raised after=SECONDS: MESSAGE`
    failure_worker.py bad_input URL    an unsupported dtype, an unsupported op, tensors of
                                       different sizes across ranks: each a RuntimeError
                                       naming the problem (`bad_input ok` at the end)
    failure_worker.py exit URL         a group left alive with an operation in flight when the
                                       script ends: the exit hook shuts it down (`shut down=N`),
                                       a later collective raises naming it, the exit is clean
Exit 0 when the case behaves as described, 1 otherwise.
"""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import heft.torch  # noqa: F401  (registers the backend)


def fail(what):
    print(f"failure_worker rank {os.environ['RANK']}: FAILED: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def join(url, timeout_s):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    kwargs = {} if url.startswith("env://") else {"rank": rank, "world_size": world}
    dist.init_process_group("heft", init_method=url, timeout=datetime.timedelta(seconds=timeout_s),
                            **kwargs)
    return rank, world


def expect_error(fn, words, what):
    try:
        fn()
    except RuntimeError as e:
        text = str(e)
        missing = [w for w in words if w not in text]
        if missing:
            fail(f"{what}: the error does not name {missing}: {text}")
        print(f"{what}: {text.splitlines()[0]}", flush=True)
        return text
    fail(f"{what}: no error")


def case_init(url):
    rank, world = join(url, 60)
    x = torch.tensor([float(rank)])
    dist.all_reduce(x)
    if x.item() != world * (world - 1) / 2:
        fail(f"sum of ranks {x.item()}")
    if dist.get_backend() != "heft":
        fail(f"backend {dist.get_backend()}")
    print(f"sum={x.item():g}", flush=True)
    dist.destroy_process_group()


def case_peer_lost(url):
    timeout_s = 10
    rank, world = join(url, timeout_s)
    dist.barrier()
    big = torch.ones(8 << 20)  # 32 MiB: long enough to be in flight when the rank dies
    if rank == world - 1:
        dist.all_reduce(big, async_op=True)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    text = expect_error(lambda: dist.all_reduce(big), [f"rank {world - 1}", "lost"],
                        "all_reduce with a dead peer")
    print(f"raised after={time.monotonic() - start:.2f}: {text.splitlines()[0]}", flush=True)
    # The group stays broken: the next call fails at once with the same error.
    expect_error(lambda: dist.all_reduce(torch.ones(4)), ["lost"], "the next all_reduce")
    os._exit(0)  # the group cannot be torn down with a dead member


def case_bad_input(url):
    rank, world = join(url, 5)
    quantized = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    # torch 2's dispatcher refuses a quantized tensor before any backend sees it (Gloo alike).
    expect_error(lambda: dist.all_reduce(quantized), ["QuantizedCPU", "allreduce"], "qint8")
    # complex SUM works: torch hands it over as pairs of floats.
    z = torch.full((3,), 1 + 2j, dtype=torch.complex64)
    dist.all_reduce(z)
    if z[0].item() != world * (1 + 2j):
        fail(f"complex all_reduce gave {z[0].item()}")
    expect_error(lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND),
                 ["BAND", "needs an integer"], "BAND on floats")
    expect_error(lambda: dist.broadcast(torch.ones(3), src=world + 5),
                 [f"root rank {world + 5}"], "broadcast from a rank outside the group")
    # The group still works after errors caught before anything was sent.
    x = torch.ones(3)
    dist.all_reduce(x)
    if x[0].item() != world:
        fail(f"all_reduce after the errors gave {x[0].item()}")
    # Sizes that differ across ranks: an error on every rank, at the latest at the timeout,
    # naming the collective; never a crash or a hang.
    for n in ((5, 9), (70_000, 50_000)):
        group = dist.new_group(backend="heft", timeout=datetime.timedelta(seconds=5))
        t = torch.ones(n[rank % 2])
        expect_error(lambda: dist.all_reduce(t, group=group), ["allreduce"],
                     f"all_reduce of {n[0]} and {n[1]} elements")
    print("bad_input ok", flush=True)
    os._exit(0)


def case_exit(url):
    import atexit
    from heft.torch import _c10d
    rank, world = join(url, 60)
    group = dist.new_group(backend="heft")
    if atexit._ncallbacks() < 1:
        fail("no exit hook registered")
    pending = dist.all_reduce(torch.ones(1 << 16), group=group, async_op=True)  # noqa: F841
    dist.barrier()
    # What the exit hook runs: both groups (the world and `group`) are shut down, once.
    print(f"shut down={_c10d.shut_down_all()} again={_c10d.shut_down_all()}", flush=True)
    expect_error(lambda: dist.all_reduce(torch.ones(1)), ["shut down"], "all_reduce after exit")
    print("exit ok", flush=True)  # the interpreter then exits with both groups alive


def main():
    case, url = sys.argv[1], sys.argv[2]
    {"init": case_init, "peer_lost": case_peer_lost, "bad_input": case_bad_input,
     "exit": case_exit}[case](url)


if __name__ == "__main__":
    main()
