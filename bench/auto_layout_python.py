"""heft.torch.parallel.auto_layout's predictions against the Python strategies, measured (issue
33: the Python path priced with heft-train's terms). Run on every rank by
bench/auto_layout_python.sh (heft run -n 2). A small nn.Sequential (Linear + ReLU blocks) is
planned by auto_layout on the world (the collectives measured on it, loss_fn priced); then three
layouts run --steps steps each with AdamW under the strategies a user would pick:
  data 2 (heft.torch.parallel.DistributedDataParallel), sharded 2 (ShardedDataParallel) and
  pipeline 2 (Pipeline, interleaved, the search's micro-batches and split for that layout);
and rank 0 prints, per layout, the search's predicted step ms beside the median measured step
(after the first) and the worst, and |predicted - measured| / measured. Steps are started by a
barrier, so each is the slowest rank's."""
import argparse
import statistics
import time

import torch
import torch.distributed as dist

import heft.torch  # noqa: F401  (registers the backend)
from heft.torch import parallel
from heft.torch.parallel import layout as _auto_layout


def model(blocks, width):
    torch.manual_seed(0)
    layers = []
    for _ in range(blocks):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def loss_of(out, target):
    return (out - target).square().mean()


def timed(step, steps):
    times = []
    for _ in range(steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    return times[1:]


def run_layout(row, args, x, y):
    """Median-after-the-first step times of `row`'s layout (a dict of the search's)."""
    l = row["layout"]
    world, rank = dist.get_world_size(), dist.get_rank()
    local = slice(rank * args.batch // world, (rank + 1) * args.batch // world)
    m = model(args.blocks, args.width)
    if l["pipeline"] > 1:
        mesh = parallel.DeviceMesh(data=l["data"], pipeline=l["pipeline"])
        pipe = parallel.Pipeline(m, mesh, microbatches=l["microbatches"], schedule="interleaved",
                                 virtual_stages=l["virtual_stages"],
                                 partition=row["stage_first"][1:])
        opt = torch.optim.AdamW(pipe.parameters(), lr=1e-4)
        def step():
            pipe.step(x, y, loss_of)
            opt.step()
            opt.zero_grad()
    else:
        wrapped = (parallel.ShardedDataParallel(m) if l["sharded"] > 1
                   else parallel.DistributedDataParallel(m))
        opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-4)
        def step():
            loss_of(wrapped(x[local]), y[local]).backward()
            opt.step()
            opt.zero_grad()
    return timed(step, args.steps)


def find(plan, data, sharded, pipeline):
    """The search's fastest row of that degree combination without checkpointing."""
    for row in plan.ranked:
        l = row["layout"]
        if ((l["data"], l["sharded"], l["tensor"], l["pipeline"]) == (data, sharded, 1, pipeline)
                and not l["checkpointing"] and (pipeline > 1 or l["microbatches"] == 1)):
            return row
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--batch", type=int, default=64, help="global batch")
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    dist.init_process_group("heft", init_method="env://")
    world, rank = dist.get_world_size(), dist.get_rank()
    torch.manual_seed(1)
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
    target = y[: args.batch // world]
    plan = _auto_layout.auto_layout(model(args.blocks, args.width), x[: args.batch // world],
                                    world=world, memory_limit=8 << 30, global_batch=args.batch,
                                    loss_fn=lambda out: loss_of(out, target))
    t = plan.inputs
    if rank == 0:
        print(f"# model: {args.blocks} x (Linear({args.width}, {args.width}), ReLU), global batch "
              f"{args.batch}, {world} ranks, AdamW; comm measured: {plan.comm_measured}; "
              f"optimizer {t['optimizer_s'] * 1e3:.2f} ms, runtime {t['fixed_bytes'] / 1e6:.0f} MB, "
              f"host {t['host_threads']:.0f} threads + load {t['host_load']:.1f} over "
              f"{t['host_cores']:.0f} cores; auto's choice: {plan.ranked[0]['layout']['text']}")
        print(f"{'layout':<58} {'pred ms':>8} {'meas ms':>8} {'worst ms':>8} {'error':>6}")
    errors = []
    for data, sharded, pipeline in ((world, 1, 1), (1, world, 1), (1, 1, world)):
        row = find(plan, data, sharded, pipeline)
        if row is None:
            continue
        times = run_layout(row, args, x, y)
        if rank == 0:
            med = statistics.median(times)
            err = abs(row["step_s"] - med) / med
            errors.append(err)
            print(f"{row['layout']['text']:<58} {row['step_s'] * 1e3:8.2f} {med * 1e3:8.2f} "
                  f"{max(times) * 1e3:8.2f} {err * 100:5.0f}%", flush=True)
    if rank == 0 and errors:
        print(f"# median |predicted - measured| / measured: {statistics.median(errors) * 100:.0f}%")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
