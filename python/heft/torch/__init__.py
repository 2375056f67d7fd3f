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


if not hasattr(_dist.Backend, "HEFT"):
    _dist.Backend.register_backend(BACKEND, _create)

__all__ = ["BACKEND", "ProcessGroupHeft"]
