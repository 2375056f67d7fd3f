"""Helpers for heft's Python tests (tests/python/*_test.py), which ctest runs with
.venv/bin/python (the interpreter with torch): where the build is, free ports, `heft run`,
and ranks started by hand (no launcher) with a deadline, killed if they pass it.
"""
import os
import socket
import subprocess
import sys
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY_DIR = os.environ.get("HEFT_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
HEFT = os.path.join(BINARY_DIR, "heft")
PYTHON = sys.executable  # .venv/bin/python (ctest runs the tests with it)
WORKERS = os.path.join(SOURCE_DIR, "tests", "python", "workers")


def worker(name):
    return os.path.join(WORKERS, name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    """This environment without PYTHONPATH (so heft run's own is what workers get) and with
    one torch thread per rank, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def heft_run(args, timeout=300, env=None):
    """`heft run ARGS`, output captured; the CompletedProcess."""
    return subprocess.run([HEFT, "run"] + args, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else clean_env())


def run_ranks(world, command, timeout, env_of_rank=None):
    """Starts `world` processes of `command` with RANK/WORLD_SIZE/MASTER_* and
    PYTHONPATH=build/python; waits at most `timeout` seconds for all (then kills the rest).
    Returns [(returncode or None if killed, stdout, stderr)] by rank."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = clean_env(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                        LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=str(port), PYTHONPATH=os.path.join(BINARY_DIR, "python"))
        if env_of_rank:
            env.update(env_of_rank(rank))
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    deadline = time.monotonic() + timeout
    results = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append((p.returncode, out, err))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            results.append((None, out, err))
    return results


def describe(results):
    return "\n".join(f"--- rank {r}: exit {rc}\n{out}{err}" for r, (rc, out, err) in enumerate(results))


def main_guard():
    if not os.path.exists(HEFT):
        sys.exit(f"{HEFT} is not built")
