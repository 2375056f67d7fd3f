"""Full (unsharded) state of a ShardedDataParallel model: gathering the flat shards back
into the wrapped module's state_dict names (collective through the engine; off the
training hot path)."""
import torch

_unflatten = torch._C._nn.unflatten_dense_tensors


def gather_flat(sdp, unit, part=None):
    """The full flat fp32 tensor of `unit`: every shard-group rank's shard (or `part`, a
    vector the shard's size: its optimizer state) joined."""
    return sdp.engine.full_values(unit.index, part)


def named_full_params(sdp, unit, flat):
    """{name: tensor} for every slot of the unit's parameters, views of flat."""
    likes = [torch.empty(l.shape) for l in unit.likes[:-1]]
    tensors = _unflatten(flat, likes + [torch.empty(unit.padded - unit.numel)])
    out = {}
    for t, places in zip(tensors, unit.slots):
        for s in places:
            out[s.name] = t
    return out


def full_state_dict(sdp):
    params = {}
    for u in sdp.units:
        params.update(named_full_params(sdp, u, gather_flat(sdp, u)))
    buffers = dict(sdp.module.named_buffers())
    out = {}
    for k in sdp._state_keys:
        if k in params:
            out[k] = params[k].clone()
        elif k in buffers:
            out[k] = buffers[k].detach().clone()
    return out
