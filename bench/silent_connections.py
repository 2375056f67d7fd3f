#!/usr/bin/env python3
"""A job against 100 silent connections to every rank's link listener (docs/security.md).

Four ranks of backend heft, started as torchrun would (env://, HEFT_TOKEN set), run --steps
all_reduce calls of 1 MiB; in the attacked runs a second process reads each rank's published
link address from torch's store (which anyone may read) the moment it appears and opens
--silent connections to it that never speak; in the plain runs the same process runs and
connects nowhere. Runs alternate plain / attacked, --rounds each;
printed: the machine, each run's job time (first rank started to last rank ended) and how many
silent connections were accepted by a listener (the rest were refused: the listener had closed
once its peers were in), then the median and worst attacked/plain ratio. Target (issue
"Nobody without the job's token touches a job"): at most 1.2x.

    .venv/bin/python bench/silent_connections.py [--rounds 3] [--silent 100] [--steps 200]
"""
import argparse
import datetime
import os
import re
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("HEFT_BINARY_DIR", os.path.join(os.path.dirname(HERE), "build"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(steps):
    import torch
    import torch.distributed as dist
    import heft.torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("heft", init_method="env://")
    x = torch.ones(1 << 18)
    for _ in range(steps):
        dist.all_reduce(x)
    dist.destroy_process_group()


def attacker_main(port, world, silent):
    import torch.distributed as dist
    store = None
    socks, connected, flooded = [], 0, set()
    end = time.monotonic() + 60
    while len(flooded) < world - 1 and time.monotonic() < end:  # the last rank only dials
        try:
            store = store or dist.TCPStore("127.0.0.1", port, is_master=False,
                                           timeout=datetime.timedelta(seconds=30))
            keys = store.list_keys()
        except dist.DistError:
            store = None
            time.sleep(0.005)
            continue
        for k in keys:
            m = re.search(r"torch-[0-9a-f]+/tcp/(\d+)$", k)
            if not m or k in flooded:
                continue
            flooded.add(k)
            host, p = re.match(rb"([0-9.]+):([0-9]+)", store.get(k)).groups()
            for _ in range(silent):
                try:
                    socks.append(socket.create_connection((host.decode(), int(p)), timeout=1))
                    connected += 1
                except OSError:
                    pass
        time.sleep(0.001)
    print(f"connected={connected} of {silent * len(flooded)}", flush=True)
    time.sleep(2)


def run_job(world, steps, silent):
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world),
               HEFT_TOKEN=os.urandom(32).hex(), OMP_NUM_THREADS="1",
               PYTHONPATH=os.path.join(BUILD, "python"))
    # The plain runs have the same process, reading the store, connecting nowhere: on a
    # machine of 2 cores its own CPU (importing torch, polling) would otherwise be the change.
    attacker = None
    if silent is not None:
        attacker = subprocess.Popen([sys.executable, __file__, "attacker", str(port), str(world),
                                     str(silent)], env=env, stdout=subprocess.PIPE, text=True)
    start = time.monotonic()
    ranks = [subprocess.Popen([sys.executable, __file__, "rank", str(steps)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
             for r in range(world)]
    codes = [p.wait() for p in ranks]
    seconds = time.monotonic() - start
    note = ""
    if attacker:
        note = attacker.communicate()[0].strip()
    if any(codes):
        sys.exit(f"a rank failed: {codes}")
    return seconds, note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--silent", type=int, default=100)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--world", type=int, default=4)
    a = ap.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    memcpy = subprocess.run([os.path.join(BUILD, "memory_bandwidth_bench"),
                             "--benchmark_filter=BM_Memcpy/1048576$"], capture_output=True, text=True).stdout
    m = re.search(r"bytes_per_second=(\S+)", memcpy)
    print(f"# {cpu}, {os.cpu_count()} cores, memcpy 1 MiB {m[1] if m else '?'}, "
          f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%M:%SZ}")
    ratios = []
    for r in range(a.rounds):
        plain, _ = run_job(a.world, a.steps, 0)
        attacked, note = run_job(a.world, a.steps, a.silent)
        ratios.append(attacked / plain)
        print(f"round {r + 1}: plain {plain:.2f} s, attacked {attacked:.2f} s ({note}), "
              f"ratio {attacked / plain:.2f}", flush=True)
    print(f"attacked/plain: median {statistics.median(ratios):.2f}, worst {max(ratios):.2f} "
          f"(target <= 1.2)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "attacker":
        attacker_main(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
