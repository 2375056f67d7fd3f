"""heft.torch.parallel's memory pre-flight: what a model's training state takes per rank,
and a refusal, before anything is allocated, when the ranks of this machine cannot hold it.

``training_state_bytes(module, optimizer, sharded_degree)`` reads only the parameters'
shapes and dtypes, so it works on a model built under ``deferred_init`` (meta tensors).
``require_memory(module, ...)`` compares that, times the ranks sharing this machine's memory,
with what the machine has available and raises ``MemoryError`` naming the model, the need,
the ranks, what is available and the way out. Without it a too-large model meets the kernel's
OOM killer part way through, on some ranks, while the others wait in a collective."""
import hashlib
import os
import socket

import torch
import torch.distributed as dist

from heft.torch import _c10d

# Optimizer -> (state elements per parameter element, state bytes per parameter tensor), from
# the memory model's one table (parallel/layout/optimizer_memory.h): Adam and AdamW keep
# exp_avg and exp_avg_sq like the parameter and a float32 scalar `step` per parameter tensor;
# amsgrad adds max_exp_avg_sq.
_OPTIMIZER_STATE = {name: (int(f[0]), int(f[1]))
                    for name, f in _c10d.parallel.layout.optimizer_memory().items()}


def optimizer_state_of(optimizer):
    """(state elements per parameter element, state bytes per parameter tensor) of an
    optimizer name (ValueError naming it when unknown)."""
    key = "none" if optimizer is None else str(optimizer).lower()
    if key not in _OPTIMIZER_STATE:
        raise ValueError(f"optimizer={optimizer!r}: expected one of "
                         f"{sorted(_OPTIMIZER_STATE)} or None")
    return _OPTIMIZER_STATE[key]


def _unique_parameters(module):
    seen, out = set(), []
    for p in module.parameters():  # tied parameters once
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def parameter_count(module):
    """Elements of the module's parameters, tied ones counted once (meta tensors work)."""
    return sum(p.numel() for p in _unique_parameters(module))


def training_state_bytes(module, optimizer="adamw", sharded_degree=1):
    """Bytes one rank holds between steps to train ``module``: its parameters, the gradients
    of the trainable ones and the optimizer's state (``optimizer``: "adamw", "adam",
    "adamw-amsgrad", "adam-amsgrad", "sgd", "sgd-momentum" or None). With
    ``sharded_degree=1`` (DDP, one process) it is exact after the first step.
    ``sharded_degree=K``: ShardedDataParallel's float32 shards, 1/K of each, short of a few
    bytes per unit (padding up to K-1 elements, the optimizer's step scalar per shard).
    Not counted: activations, a unit's gathered parameters during a step, DDP's gradient
    buckets (one more gradient copy), torch itself: it is a lower bound of the peak."""
    per_element, per_tensor = optimizer_state_of(optimizer)
    if not isinstance(sharded_degree, int) or sharded_degree < 1:
        raise ValueError(f"sharded_degree={sharded_degree!r}: expected a positive integer")
    params = _unique_parameters(module)
    if sharded_degree == 1:
        total = 0
        for p in params:
            size = p.numel() * p.element_size()
            total += size
            if p.requires_grad:
                total += size + per_element * size + per_tensor
        return total
    elements = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    shard = lambda n: -(-n // sharded_degree) * 4  # noqa: E731  (float32 shards)
    return shard(elements) + (1 + per_element) * shard(trainable) + per_tensor


def _machine_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    digest = hashlib.sha1((socket.gethostname() + "/" + boot).encode()).digest()
    return int.from_bytes(digest[:8], "little", signed=True)


def _machines():
    """[(ranks, available bytes)] per machine of the job: with a default process group one
    all-gather of (machine id, available_bytes()) from every rank (every rank must call it;
    it also groups heft run's simulated hosts, all on one machine), a machine's available
    bytes the least any of its ranks saw, this machine first; without a group, this machine
    with LOCAL_WORLD_SIZE ranks (heft run, heft train, torchrun), else 1."""
    return [(r, a) for r, a, _ in machines_needing(0)]


def machines_needing(need):
    """[(ranks, available bytes, the ranks' summed need)] per machine, this machine first,
    when each rank will add `need` bytes (ranks may differ): as _machines, one all-gather
    over the default group when there is one (every rank must call it), else this machine
    with LOCAL_WORLD_SIZE ranks each needing `need`."""
    if dist.is_available() and dist.is_initialized():
        mine = torch.tensor([_machine_id(), available_bytes(), int(need)], dtype=torch.int64)
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        machines = {int(mine[0]): [0, int(mine[1]), 0]}
        for t in every:
            entry = machines.setdefault(int(t[0]), [0, int(t[1]), 0])
            entry[0] += 1
            entry[1] = min(entry[1], int(t[1]))
            entry[2] += int(t[2])
        return [tuple(v) for v in machines.values()]
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    ranks = int(value) if value.isdigit() and int(value) > 0 else 1
    return [(ranks, available_bytes(), ranks * int(need))]


def ranks_on_host():
    """Processes of this job sharing this machine's memory (see _machines: collective with a
    default process group)."""
    return _machines()[0][0]


def available_bytes():
    """What this machine can still give: /proc/meminfo's MemAvailable, or less when this
    process's memory cgroup has a lower limit left (the C++ reader, host/host.h, which the
    auto layout uses too)."""
    return int(_c10d.parallel.layout.available_host_memory())


def _gb(n):
    return f"{n / 1e9:.1f} GB"


def require_memory(module, optimizer="adamw", sharded_degree=1, *, what=None, ranks=None):
    """Refuses, before anything is allocated, to train ``module`` when the ranks on a machine
    of the job cannot hold its training state: raises ``MemoryError`` when
    ``training_state_bytes(module, optimizer, sharded_degree)`` times the ranks sharing a
    machine exceeds what that machine has available (``available_bytes()``). With a default
    process group it is collective (one all-gather) and every rank decides alike, raising
    when any machine is short; ``ranks=N`` instead takes N ranks on this machine, no
    collective. The message names ``what`` (default: the module's class), the parameter
    count, the need per rank and per machine, what is available, and the smallest
    ``sharded_degree`` that fits (or that none does). Returns the bytes per rank."""
    need = training_state_bytes(module, optimizer, sharded_degree)
    machines = _machines() if ranks is None else [(int(ranks), available_bytes())]
    short = [m for m in machines if need * m[0] > m[1]]
    if not short:
        return need
    where = "this machine" if short[0] is machines[0] else "another machine of the job"
    ranks, available = short[0]
    name = what or type(module).__name__
    layout = (f"sharded over {sharded_degree} ranks" if sharded_degree > 1
              else "a full replica per rank, as DDP keeps")
    message = (f"{name}: {parameter_count(module):,} parameters, whose parameters, gradients "
               f"and {optimizer} state take {_gb(need)} per rank ({layout}); the {ranks} "
               f"rank(s) on {where} need {_gb(need * ranks)} and {_gb(available)} is "
               "available (MemAvailable)")
    fits = next((k for k in range(sharded_degree + 1, 1025)
                 if all(training_state_bytes(module, optimizer, k) * r <= a for r, a in short)),
                None)
    if fits is None:
        raise MemoryError(message + "; it does not fit here even sharded over 1024 ranks")
    raise MemoryError(message + f": use ShardedDataParallel with sharded_degree >= {fits} "
                      f"({_gb(training_state_bytes(module, optimizer, fits))} per rank)")
