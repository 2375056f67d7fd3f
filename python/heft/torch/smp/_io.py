"""smp.save and smp.load: torch.save / torch.load, each partial file named after the rank's
place in the model (<f>_<pp_rank>_<tp_rank>), written atomically (a temporary file renamed
over the target: a crash leaves the old file or the new, never half of one)."""
import os
import tempfile

import torch

from ._state import pp_rank, state, tp_rank


def partial_path(f):
    """Where smp.save(..., partial=True) writes this rank's part of f."""
    return f"{os.fspath(f)}_{pp_rank()}_{tp_rank()}"


def save(obj, f, partial=True, pickle_module=None, pickle_protocol=2):
    """Saves obj to f, or with partial=True (the default) to this rank's part of it
    (partial_path). The script chooses which ranks save (commonly smp.dp_rank() == 0)."""
    state.need("save")
    path = partial_path(f) if partial else os.fspath(f)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".smp-save-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            kwargs = {"pickle_protocol": pickle_protocol}
            if pickle_module is not None:
                kwargs["pickle_module"] = pickle_module
            torch.save(obj, out, **kwargs)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(f, partial=True, map_location="cpu", **kwargs):
    """What smp.save wrote: f itself, or with partial=True this rank's part of it. torch.load's
    other arguments pass through (weights_only as torch's default: objects beyond tensors and
    plain containers need weights_only=False, for files you trust)."""
    state.need("load")
    path = partial_path(f) if partial else os.fspath(f)
    if not os.path.exists(path):
        raise FileNotFoundError(f"smp.load: {path} does not exist"
                                + (" (the partial file of this rank: pp_rank "
                                   f"{pp_rank()}, tp_rank {tp_rank()})" if partial else ""))
    return torch.load(path, map_location=map_location, **kwargs)
