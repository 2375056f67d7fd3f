"""The torch.distributed backend ``heft``.

Importing this module registers it::

    import heft.torch
    torch.distributed.init_process_group(backend="heft", init_method="env://")

Under ``heft run`` or ``heft train``, ``heft.torch.distributed.init_process_group()`` with no
arguments joins through heft's own authenticated store instead.
"""
import torch.distributed as _dist

from . import _c10d
from ._c10d import ProcessGroupHeft

BACKEND = "heft"


def _create(store, rank, size, timeout):
    return ProcessGroupHeft(store, rank, size, timeout.total_seconds())


def backend_of(group=None):
    """heft's backend (a ``ProcessGroupHeft``: its counters and probes) behind a torch
    process group on backend ``heft``; ``None``: the default group. A RuntimeError naming
    the backend found when the group is not heft's."""
    if group is None:
        group = _dist.group.WORLD
    return _c10d.backend_of(group)


if not hasattr(_dist.Backend, "HEFT"):
    # torch 2: a c10d Backend for CPU tensors, which torch's ProcessGroup wraps.
    _dist.Backend.register_backend(BACKEND, _create, devices=["cpu"])

__all__ = ["BACKEND", "ProcessGroupHeft", "backend_of"]
