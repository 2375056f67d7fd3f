"""The torch.distributed backend ``heft``.

Importing this module registers it::

    import heft.torch
    torch.distributed.init_process_group(backend="heft", init_method="env://")

Under ``heft run`` or ``heft train``, ``heft.torch.distributed.init_process_group()`` with no
arguments joins through heft's own authenticated store instead.
"""
import datetime as _datetime
import sys as _sys

import torch.distributed as _dist
from torch.distributed.constants import default_pg_timeout as _default_pg_timeout

from . import _c10d
from ._c10d import ProcessGroupHeft

BACKEND = "heft"


_warned_no_token = False


def _create(store, rank, size, timeout):
    global _warned_no_token
    # The job's timeout (HEFT_TIMEOUT, from stopping.timeout_s under heft run/train) where the
    # script left torch's default: a hung peer then fails the job as heft's docs say, not
    # after torch's 30 minutes. A timeout the script names still wins.
    job = _c10d.worker_contract()  # the worker contract's reader (docs/worker-contract.md)
    if job["timeout_s"] is not None and timeout == _default_pg_timeout:
        timeout = _datetime.timedelta(seconds=job["timeout_s"])
    if job["token"] is None and not _warned_no_token:
        _warned_no_token = True
        print("heft: HEFT_TOKEN is not set (the script was not started by heft run or heft "
              "train): backend heft authenticates its links with a key published in torch's "
              "store, which any user of this machine who can reach that store can read or "
              "change. Start the script with `heft run` for links only the job can join "
              "(docs/security.md).", file=_sys.stderr, flush=True)
    return ProcessGroupHeft(store, rank, size, timeout.total_seconds())


def backend_of(group=None):
    """heft's backend (a ``ProcessGroupHeft``: its counters and probes) behind a torch
    process group on backend ``heft``; ``None``: the default group. A RuntimeError naming
    the backend found when the group is not heft's."""
    if group is None:
        group = _dist.group.WORLD
    return _c10d.backend_of(group)


if not hasattr(_dist.Backend, "HEFT"):
    # torch 2: a c10d Backend, which torch's ProcessGroup wraps, for CPU tensors and for CUDA
    # tensors, which it stages through pinned host memory (ranks that share a GPU, or a GPU
    # without NCCL; docs/gpu.md). "cpu:heft,cuda:nccl" keeps NCCL for CUDA tensors.
    _dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])

__all__ = ["BACKEND", "ProcessGroupHeft", "backend_of"]
