"""The cloud data-parallel library's script API over heft (``smdistributed.dataparallel.
torch.distributed`` in the seeds): a script written for it changes only its imports, and
runs on CPUs under ``heft run`` / ``heft train``. The one-line alias:

    import heft.torch.distributed as dist   # was: import smdistributed.dataparallel.torch.distributed as dist
    dist.init_process_group()
    rank, local_rank = dist.get_rank(), dist.get_local_rank()
    size, local_size = dist.get_world_size(), dist.get_local_size()

The library's functions: is_available, init_process_group, is_initialized, get_rank,
get_world_size, get_local_rank, get_local_size, barrier, all_reduce, broadcast, reduce,
all_gather, all_to_all_single, ReduceOp, new_group, destroy_process_group; heft adds
get_node_rank and get_num_nodes (hosts), and torch's gather, scatter, all_to_all,
reduce_scatter, all_gather_object, broadcast_object_list, get_backend and group.
``alias_smdistributed()`` makes the library's own import lines load these modules (for a
script that must stay untouched; docs/porting.md).
"""
import datetime as _datetime
import os as _os
import sys as _sys
import types as _types

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
        job = _c10d.worker_contract()
        timeout = _datetime.timedelta(seconds=job["timeout_s"] or job["default_timeout_s"])
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


def join_heft_group(who):
    """The default process group on backend heft, for APIs that join on the script's behalf
    (tsm.init, smp.init; `who` names the caller): the one the script made (RuntimeError when
    it uses another backend), else one made here from the environment (heft's store under
    heft run / heft train, env:// under torchrun)."""
    if _dist.is_initialized():
        if str(_dist.get_backend()).lower() != BACKEND:
            library = who.split(".")[0]
            raise RuntimeError(f"{who}: the default process group uses backend "
                               f"{_dist.get_backend()!r}; {library} runs on backend "
                               f"{BACKEND!r} (call {who}() first, or "
                               "init_process_group('heft'))")
        return
    if _c10d.worker_contract()["store"] is not None:
        init_process_group()
    else:
        init_process_group(init_method="env://")


def get_local_rank():
    """This process's rank on its host (LOCAL_RANK)."""
    return _env_int("LOCAL_RANK", 0 if get_world_size() == 1 else None)


def get_local_size():
    """Processes on this host (LOCAL_WORLD_SIZE)."""
    return _env_int("LOCAL_WORLD_SIZE", 1 if get_world_size() == 1 else None)


def is_available():
    """True when the script was started as a distributed job (heft run, heft train, torchrun:
    RANK and WORLD_SIZE set); a script run alone checks it and skips the library."""
    return _dist.is_available() and bool(_os.environ.get("RANK")) and bool(
        _os.environ.get("WORLD_SIZE"))


def get_node_rank():
    """This host's index among the job's hosts (GROUP_RANK: algo-1 is 0)."""
    return _env_int("GROUP_RANK", 0 if get_world_size() == 1 else None)


def get_num_nodes():
    """The job's hosts: WORLD_SIZE / LOCAL_WORLD_SIZE (heft's hosts all run the same number
    of workers)."""
    world, local = get_world_size(), get_local_size()
    if local <= 0 or world % local:
        raise RuntimeError(f"heft.torch.distributed: WORLD_SIZE {world} is not a multiple of "
                           f"LOCAL_WORLD_SIZE {local}")
    return world // local


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
all_to_all_single = _dist.all_to_all_single
all_to_all = _dist.all_to_all
gather = _dist.gather
scatter = _dist.scatter
reduce_scatter = _dist.reduce_scatter
all_gather_object = _dist.all_gather_object
broadcast_object_list = _dist.broadcast_object_list
get_backend = _dist.get_backend
group = _dist.group


def alias_smdistributed():
    """Makes ``import smdistributed.dataparallel.torch.distributed as dist`` and
    ``from smdistributed.dataparallel.torch.parallel.distributed import
    DistributedDataParallel`` load this module and heft.torch.parallel's DDP, for a script
    that cannot be edited (call it first, e.g. from sitecustomize). Refused (RuntimeError)
    when the real library is importable: heft does not shadow an installed package."""
    import importlib.util
    if "smdistributed" not in _sys.modules and importlib.util.find_spec("smdistributed"):
        raise RuntimeError("heft.torch.distributed.alias_smdistributed: the smdistributed "
                           "package is installed; import heft.torch.distributed instead")
    from . import parallel
    this = _sys.modules[__name__]
    names = ["smdistributed", "smdistributed.dataparallel", "smdistributed.dataparallel.torch",
             "smdistributed.dataparallel.torch.parallel"]
    for name in names:
        module = _sys.modules.get(name) or _types.ModuleType(name)
        module.__path__ = []
        _sys.modules[name] = module
    ddp = _types.ModuleType("smdistributed.dataparallel.torch.parallel.distributed")
    ddp.DistributedDataParallel = parallel.DistributedDataParallel
    _sys.modules[ddp.__name__] = ddp
    _sys.modules["smdistributed.dataparallel.torch.distributed"] = this
    for parent, child, value in (("smdistributed", "dataparallel", None),
                                 ("smdistributed.dataparallel", "torch", None),
                                 ("smdistributed.dataparallel.torch", "parallel", None),
                                 ("smdistributed.dataparallel.torch", "distributed", this),
                                 ("smdistributed.dataparallel.torch.parallel", "distributed", ddp)):
        setattr(_sys.modules[parent], child, value or _sys.modules[parent + "." + child])
    parallel_module = _sys.modules["smdistributed.dataparallel.torch.parallel"]
    parallel_module.DistributedDataParallel = parallel.DistributedDataParallel
