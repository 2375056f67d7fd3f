"""Pipeline's argument checks and partition (heft.torch.parallel.Pipeline, __init__.py): the
model as a list of layers, profiled on one rank by heft's C++ profile_layers (calling back
here to time each layer) and cut by heft's C++ auto_partition or manual_partition; the plan
is broadcast from world rank 0, so every rank holds the same one."""
import torch
import torch.distributed as dist

from heft.torch import _c10d

_pp = _c10d.parallel.pipeline
PROFILE_WARMUP, PROFILE_REPEATS = 2, 7


def layers_of(model):
    """The model's layers in order: an nn.Sequential's children or a list of modules."""
    if isinstance(model, torch.nn.Sequential):
        layers = list(model.children())
    elif isinstance(model, (list, tuple)):
        layers = list(model)
    else:
        raise TypeError("Pipeline: stages_or_sequential must be an nn.Sequential or a list of "
                        f"nn.Module layers, found {type(model).__name__}")
    for i, layer in enumerate(layers):
        if not isinstance(layer, torch.nn.Module):
            raise TypeError(f"Pipeline: stages_or_sequential[{i}] is a {type(layer).__name__}, "
                            "expected an nn.Module")
    if not layers:
        raise ValueError("Pipeline: stages_or_sequential has no layers")
    return layers


def positive(argument, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"Pipeline: {argument}={value!r}: expected a positive integer")
    return value


def check_arguments(layers, stages, microbatches, schedule, virtual_stages, partition,
                    memory_weight, active_microbatches):
    """Raises ValueError/TypeError naming the argument; the same on every rank (depends only
    on the arguments and the mesh)."""
    positive("microbatches", microbatches)
    positive("virtual_stages", virtual_stages)
    if schedule not in ("simple", "interleaved"):
        raise ValueError(f"Pipeline: schedule={schedule!r}: expected 'simple' or 'interleaved'")
    if virtual_stages > 1 and schedule != "interleaved":
        raise ValueError(f"Pipeline: virtual_stages={virtual_stages} needs "
                         "schedule='interleaved'")
    chunks = stages * virtual_stages
    if chunks > len(layers):
        raise ValueError(f"Pipeline: {stages} pipeline stages x virtual_stages={virtual_stages}"
                         f" = {chunks} model chunks, but stages_or_sequential has only "
                         f"{len(layers)} layers (at least one layer per chunk)")
    if not isinstance(memory_weight, (int, float)) or not 0 <= memory_weight <= 1:
        raise ValueError(f"Pipeline: memory_weight={memory_weight!r}: expected a number in "
                         "[0, 1]")
    if active_microbatches is not None:
        positive("active_microbatches", active_microbatches)
        if schedule == "simple" and active_microbatches < microbatches:
            raise ValueError(f"Pipeline: active_microbatches={active_microbatches}: the simple "
                             f"schedule holds all {microbatches} micro-batches in flight; use "
                             "schedule='interleaved' to bound them")
    if partition != "auto":
        if (not isinstance(partition, (list, tuple))
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in partition)):
            raise ValueError(f"Pipeline: partition={partition!r}: expected 'auto' or a list of "
                             "layer indices (the first layer of each chunk after the first)")
        if len(partition) != chunks - 1:
            raise ValueError(f"Pipeline: partition={list(partition)}: expected {chunks - 1} "
                             f"boundaries for {chunks} model chunks")


def _bytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def _static_costs(layers):
    return [(f"{i}:{type(l).__name__}", 0.0, 0.0, _bytes(l.parameters()), 0)
            for i, l in enumerate(layers)]


def _profile(layers, example_input, clock=None):
    """Each layer's median forward/backward seconds (heft's profile_layers) with parameter
    and output bytes, on this rank; leaves the RNG, the buffers and the gradients as found.
    clock: the seconds to read (default wall time; auto_layout reads the process's CPU time,
    as heft-train's profile, and prices the host's contention itself)."""
    now = clock or _now
    rng = torch.get_rng_state()
    buffers = [(b, b.detach().clone()) for l in layers for b in l.buffers()]
    inputs, rows = [], []
    x = example_input.detach().clone()  # a first layer that works in place leaves it as given
    with torch.no_grad():
        for i, layer in enumerate(layers):
            inputs.append(x)
            y = layer(x)
            rows.append((f"{i}:{type(layer).__name__}", 0.0, 0.0, _bytes(layer.parameters()),
                         y.numel() * y.element_size()))
            x = y

    def time_layer(i):
        x = inputs[i]
        if x.is_floating_point():  # a copy, not a leaf: a layer that works in place
            # (nn.ReLU(inplace=True)) may write it. The first layer's input gradient is
            # computed (and timed) only when example_input requires grad, as in a step, where
            # the first stage computes it only for inputs that do: else the profile gives the
            # first layer a backward it never runs, and its stage less work than it could take
            grad = i > 0 or example_input.requires_grad
            x = x.detach().requires_grad_(grad).clone()
        t0 = now()
        y = layers[i](x)
        t1 = now()
        if y.requires_grad:
            y.backward(torch.ones_like(y))
        return t1 - t0, now() - t1

    try:
        rows = _pp.profile_layers(rows, PROFILE_WARMUP, PROFILE_REPEATS, time_layer)
    finally:
        torch.set_rng_state(rng)
        with torch.no_grad():
            for b, saved in buffers:
                b.copy_(saved)
        for layer in layers:
            for p in layer.parameters():
                p.grad = None
    return rows


def _now():
    import time
    return time.perf_counter()


def plan(layers, chunks, partition, memory_weight, example_input):
    """(first layer of each chunk, the plan's text); the same on every rank. `auto` profiles
    on world rank 0 (needs example_input, one micro-batch of the input) and broadcasts."""
    if partition != "auto":
        made = _pp.manual_partition(_static_costs(layers), list(partition), memory_weight)
        return made["first"], "partition (given)\n" + made["describe"]
    if any(p.is_meta for layer in layers for p in layer.parameters()):
        # deferred_init: no values to run; heft's partitioner balances the parameter bytes
        # (the same on every rank, nothing to broadcast)
        made = _pp.auto_partition(_static_costs(layers), chunks, 1.0, 0.05)
        return made["first"], ("partition (auto, deferred_init: by parameter bytes, no layer "
                               "profiled)\n" + made["describe"])
    if example_input is None:
        raise ValueError("Pipeline: partition='auto' profiles the layers on one micro-batch: "
                         "pass example_input (one micro-batch of the input), or give partition "
                         "as a list of boundaries")
    first = torch.zeros(chunks, dtype=torch.long)
    text = ""
    rank0 = dist.get_rank() == 0
    if rank0:
        rows = _profile(layers, example_input)
        made = _pp.auto_partition(rows, chunks, memory_weight, 0.05)
        first = torch.tensor(made["first"], dtype=torch.long)
        text = ("partition (auto: profiled on rank 0, heft's partitioner, memory_weight "
                f"{memory_weight})\n" + made["describe"])
    dist.broadcast(first, 0)
    return first.tolist(), text
