"""The vendor's current data-parallel API on heft: importing this module registers torch.distributed
backend ``smddp``, which is heft's backend under the vendor's name, so a script's

    import smdistributed.dataparallel.torch.torch_smddp
    dist.init_process_group(backend="smddp")

joins the job's group over heft's collectives (CPU tensors; docs/porting.md)."""
import torch.distributed as _dist

import heft.torch as _heft

BACKEND = "smddp"

if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _heft._create, devices=["cpu"])
