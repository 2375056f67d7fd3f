"""``heft.torch.parallel``: data, sharded, tensor and pipeline parallelism for a PyTorch model
over the heft backend.

``DistributedDataParallel``: torch's DDP over the heft group (the cloud library's
``smdistributed.dataparallel.torch.parallel.DistributedDataParallel``).
``ShardedDataParallel``: parameters, gradients and optimizer state sharded over the ranks
(ZeRO-3 / FSDP), with ``deferred_init`` and checkpoints (docs/sharded.md).
``tensor_parallel``: tensor parallelism by plan on heft's C++ tensor layers (docs/parallel.md).
``Pipeline``: pipeline parallelism on heft's C++ schedules and partitioner (docs/pipeline.md).
``auto_layout``: the data, sharded, tensor and pipeline degrees a cost model and search choose
for a model, a world and a memory limit (docs/auto-layout.md).
``DeviceMesh``: the world laid out on data, pipeline, tensor and sharded dimensions.
``estimate_memory``: a rank's peak memory for a layout of a model, by component, from a short
measurement (docs/sharded.md#memory-estimate).
``training_state_bytes`` and ``require_memory``: a memory pre-flight that refuses a model
the ranks on this machine cannot hold before anything is allocated."""
import torch.distributed as _dist
from torch.nn.parallel import DistributedDataParallel as _TorchDDP

from heft.torch import BACKEND
from .layout import LayoutPlan, MemoryEstimate, auto_layout, estimate_memory  # noqa: F401
from .memory import (available_bytes, parameter_count, ranks_on_host,  # noqa: F401
                             require_memory, training_state_bytes)
from .mesh import DeviceMesh  # noqa: F401
from .pipeline import Pipeline  # noqa: F401
from .sharded import ShardedDataParallel  # noqa: F401
from .sharded._checkpoint import (load_checkpoint, load_full_state_dict,  # noqa: F401
                                  load_torch_state_dicts, read_dcp, save_checkpoint,
                                  torch_state_dicts)
from .deferred import deferred_init  # noqa: F401
from .tensor import full_state_dict, tensor_parallel, vocab_parallel_cross_entropy  # noqa: F401


class DistributedDataParallel(_TorchDDP):
    """torch.nn.parallel.DistributedDataParallel whose gradients go through heft.

    Takes torch DDP's arguments; the process group defaults to the default group, which
    must use backend ``heft`` (``heft.torch.distributed.init_process_group()``).
    """

    def __init__(self, module, *args, **kwargs):
        group = kwargs.get("process_group")
        if group is None:
            if not _dist.is_initialized():
                raise RuntimeError(
                    "heft.torch.parallel.DistributedDataParallel: call "
                    "heft.torch.distributed.init_process_group() first")
            if str(_dist.get_backend()).lower() != BACKEND:
                raise RuntimeError(
                    "heft.torch.parallel.DistributedDataParallel: the default process group "
                    f"uses backend {_dist.get_backend()!r}, expected {BACKEND!r}")
        super().__init__(module, *args, **kwargs)


# What `from heft.torch.parallel import *` gives, as before the rooms (whose subpackages are
# attributes of this package too): the public names above, not the rooms.
__all__ = ["BACKEND", "DeviceMesh", "DistributedDataParallel", "LayoutPlan", "Pipeline",
           "ShardedDataParallel", "MemoryEstimate", "auto_layout", "available_bytes", "deferred_init",
           "estimate_memory",
           "full_state_dict", "load_checkpoint", "load_full_state_dict",
           "load_torch_state_dicts", "read_dcp", "torch_state_dicts", "parameter_count",
           "ranks_on_host", "require_memory", "save_checkpoint", "tensor_parallel",
           "training_state_bytes", "vocab_parallel_cross_entropy"]
