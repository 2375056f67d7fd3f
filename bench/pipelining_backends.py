"""torch.distributed.pipelining on backend heft against the same program on Gloo (issue "A
PyTorch 2 training script gets faster by naming heft"): torch's own PipelineStage and
schedules (ScheduleGPipe, Schedule1F1B), the backend the only change, at 2 and 4 stages, on a
stack of 8 blocks (Linear 512 -> 512, tanh) split evenly, 8 micro-batches of 64 rows, MSE loss,
SGD, one thread per rank. --rounds rounds, the backends alternating which runs first. Per
configuration: the median step seconds (steps 3..--steps) of each backend per round, then the
median over rounds and the worst round's ratio Gloo / heft (above 1: heft faster); both
backends' losses must agree.

    .venv/bin/python bench/pipelining_backends.py [--rounds 3] [--steps 20]
As a worker (under heft run): pipelining_backends.py --worker BACKEND SCHEDULE STEPS."""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEFT, PY = os.path.join(ROOT, "build", "heft"), os.path.join(ROOT, ".venv", "bin", "python")
BLOCKS, WIDTH, MICRO, ROWS = 8, 512, 8, 64
RESULT = re.compile(r"RESULT loss=(\S+) step_s=(\S+)")


def worker(backend, schedule, steps):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    if backend == "heft":
        import heft.torch  # noqa: F401  registers the backend "heft"
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(BLOCKS)]
    per = BLOCKS // world
    mine = nn.Sequential(*blocks[rank * per:(rank + 1) * per])
    stage = PipelineStage(mine, rank, world, torch.device("cpu"))
    loss_fn = nn.MSELoss()
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    sched = kind(stage, n_microbatches=MICRO, loss_fn=loss_fn)
    opt = torch.optim.SGD(mine.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    times, last = [], None
    for step in range(steps):
        x = torch.randn(MICRO * ROWS, WIDTH, generator=g)
        y = torch.randn(MICRO * ROWS, WIDTH, generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        losses = []
        if rank == 0:
            sched.step(x)
        elif rank == world - 1:
            sched.step(target=y, losses=losses)
        else:
            sched.step()
        opt.step()
        total = torch.zeros(1, dtype=torch.float64)
        if losses:
            total += torch.stack([l.detach().double() for l in losses]).mean()
        dist.broadcast(total, world - 1)
        times.append(time.perf_counter() - t0)
        last = total.item()
    if rank == 0:
        print(f"RESULT loss={last:.9g} step_s={statistics.median(times[2:]):.5f}", flush=True)
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # torch 2.11's Gloo can abort in the interpreter's teardown


def run(backend, schedule, stages, steps):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    r = subprocess.run([HEFT, "run", "-n", str(stages), "--", PY, "-u", os.path.abspath(__file__),
                        "--worker", backend, schedule, str(steps)], capture_output=True,
                       text=True, timeout=600, env=env)
    m = RESULT.search(r.stdout)
    if r.returncode or not m:
        sys.exit(f"pipelining_backends: {backend} {schedule} {stages} stages failed:\n"
                 f"{(r.stdout + r.stderr)[-3000:]}")
    return float(m[2]), m[1]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print(f"# machine: {os.cpu_count()} cores, {cpu}; blocks={BLOCKS} width={WIDTH} "
          f"microbatches={MICRO}x{ROWS} steps={args.steps} rounds={args.rounds}; load "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
    bench = os.path.join(ROOT, "build", "memory_bandwidth_bench")
    if os.path.exists(bench):
        out = subprocess.run([bench, "--benchmark_filter=BM_Memcpy/1048576$",
                              "--benchmark_min_time=0.1", "--benchmark_format=csv"],
                             capture_output=True, text=True).stdout
        for row in out.splitlines():
            if "BM_Memcpy" in row:
                print(f"# memcpy 1 MiB: {float(row.split(',')[5]) / 1e9:.1f} GB/s", flush=True)
    table = {}
    for k in range(args.rounds):
        order = ("gloo", "heft") if k % 2 == 0 else ("heft", "gloo")
        for stages in (2, 4):
            for schedule in ("gpipe", "1f1b"):
                for backend in order:
                    s, loss = run(backend, schedule, stages, args.steps)
                    table.setdefault((schedule, stages), {}).setdefault(backend, []).append(
                        (s, loss))
                    print(f"round {k + 1}: {schedule:5s} {stages} stages {backend:4s} "
                          f"{s:.4f} s/step  loss {loss}", flush=True)
    print("\n| schedule | stages | Gloo s/step | heft s/step | Gloo / heft, median | worst round |"
          " losses equal |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for (schedule, stages), sides in table.items():
        g, h = [s for s, _ in sides["gloo"]], [s for s, _ in sides["heft"]]
        same = {l for _, l in sides["gloo"]} == {l for _, l in sides["heft"]}
        worst = min(a / b for a, b in zip(g, h))
        print(f"| {schedule} | {stages} | {statistics.median(g):.4f} | {statistics.median(h):.4f}"
              f" | {statistics.median(g) / statistics.median(h):.2f} | {worst:.2f} | "
              f"{'yes' if same else 'no'} |")


if __name__ == "__main__":
    main()
