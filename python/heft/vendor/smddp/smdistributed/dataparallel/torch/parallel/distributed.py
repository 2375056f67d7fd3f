"""The vendor's older data-parallel class on heft: ``DistributedDataParallel`` is
heft.torch.parallel's (torch's DDP over the job's heft group), taking the vendor's arguments.
On CPUs the device arguments a GPU script passes (``device_ids=[local_rank]``) are dropped: the
device patch such a script needs besides its own ``.to(device)`` calls (docs/porting.md)."""
from heft.torch import parallel as _parallel

from .. import distributed as _joined  # noqa: F401  (joins the group, as the vendor's import does)


class DistributedDataParallel(_parallel.DistributedDataParallel):
    def __init__(self, module, device_ids=None, output_device=None, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, **kwargs):
        if all(p.device.type == "cpu" for p in module.parameters()):
            device_ids, output_device = None, None
        super().__init__(module, device_ids=device_ids, output_device=output_device,
                         broadcast_buffers=broadcast_buffers, process_group=process_group,
                         bucket_cap_mb=bucket_cap_mb, **kwargs)


__all__ = ["DistributedDataParallel"]
