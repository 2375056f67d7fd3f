"""The cloud data-parallel library's script API over heft (``smdistributed.dataparallel.
torch.distributed`` in the seeds): a script written for it changes only its imports.

    import heft.torch.distributed as dist
    dist.init_process_group()
    rank, local_rank = dist.get_rank(), dist.get_local_rank()
"""
import datetime as _datetime
import os as _os

import torch.distributed as _dist

from . import BACKEND, _c10d


def _env_int(name, default=None):
    value = _os.environ.get(name)
    if value is None or value == "":
        if default is not None:
            return default
        raise RuntimeError(
            f"heft.torch.distributed: {name} is not set (start the script with `heft run` "
            "or `heft train`)")
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"heft.torch.distributed: {name}: expected an integer, found {value!r}")


def init_process_group(backend=BACKEND, timeout=None, **kwargs):
    """Joins the job's process group with backend ``heft``.

    Under ``heft run``/``heft train`` (HEFT_STORE and HEFT_TOKEN set) the rendezvous goes
    through heft's authenticated store; any keyword argument torch's
    ``init_process_group`` takes (``init_method``, ``store``, ``rank``, ``world_size``) makes
    it torch's instead. ``timeout``: a ``timedelta`` or seconds (default HEFT_TIMEOUT, else
    300 s); a peer lost for longer fails every operation with a RuntimeError.
    """
    if backend != BACKEND:
        raise ValueError(f"heft.torch.distributed: backend must be {BACKEND!r}, found {backend!r}")
    if timeout is None:
        timeout = _datetime.timedelta(seconds=float(_os.environ.get("HEFT_TIMEOUT", "300")))
    elif not isinstance(timeout, _datetime.timedelta):
        timeout = _datetime.timedelta(seconds=float(timeout))
    if kwargs:
        return _dist.init_process_group(backend=BACKEND, timeout=timeout, **kwargs)
    store = _c10d.job_store(timeout.total_seconds())
    return _dist.init_process_group(backend=BACKEND, store=store, rank=_env_int("RANK"),
                                    world_size=_env_int("WORLD_SIZE"), timeout=timeout)


def is_initialized():
    return _dist.is_initialized()


def get_rank(group=None):
    return _dist.get_rank(group) if group is not None else _dist.get_rank()


def get_world_size(group=None):
    return _dist.get_world_size(group) if group is not None else _dist.get_world_size()


def get_local_rank():
    """This process's rank on its host (LOCAL_RANK)."""
    return _env_int("LOCAL_RANK", 0 if get_world_size() == 1 else None)


def get_local_size():
    """Processes on this host (LOCAL_WORLD_SIZE)."""
    return _env_int("LOCAL_WORLD_SIZE", 1 if get_world_size() == 1 else None)


def barrier(group=None):
    return _dist.barrier(group) if group is not None else _dist.barrier()


def destroy_process_group(group=None):
    return _dist.destroy_process_group(group) if group is not None else _dist.destroy_process_group()


# The rest of torch.distributed, for scripts that use more than the above.
all_reduce = _dist.all_reduce
broadcast = _dist.broadcast
all_gather = _dist.all_gather
reduce = _dist.reduce
ReduceOp = _dist.ReduceOp
new_group = _dist.new_group
