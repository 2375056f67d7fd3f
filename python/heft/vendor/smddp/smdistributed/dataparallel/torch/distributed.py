"""The vendor's older data-parallel API on heft (``import smdistributed.dataparallel.torch.
distributed as dist``): heft.torch.distributed's functions under the vendor's module path, and
the job's group joined when the module is imported, as the vendor's module does (on backend
``heft`` through the job's authenticated store); ``init_process_group()`` after that is a no-op.
A name the vendor's module has that heft does not provide raises an AttributeError saying so
(docs/porting.md)."""
import heft.torch.distributed as _heft
from heft.torch.distributed import (  # noqa: F401  (the vendor's names, heft's functions)
    ReduceOp, all_gather, all_reduce, all_to_all_single, barrier, broadcast,
    destroy_process_group, get_local_rank, get_local_size, get_rank, get_world_size, group,
    is_available, is_initialized, new_group, reduce)


def init_process_group(*args, **kwargs):
    """Joins the job's group (heft.torch.distributed.init_process_group) unless already joined,
    as at import."""
    if not _heft.is_initialized():
        _heft.init_process_group(*args, **kwargs)


def __getattr__(name):
    raise AttributeError(f"smdistributed.dataparallel.torch.distributed.{name}: heft does not "
                         "provide it (docs/porting.md lists what it does)")


init_process_group()
