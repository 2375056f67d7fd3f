"""ShardedDataParallel's own memory pre-flight: before any shard is allocated, what each rank
will add to its resident memory to train the model sharded (its shards of the parameters,
gradients and optimizer state, and the step's peaks: the units gathered at once and the
gradients on their way to a reduce-scatter), summed over the ranks of each machine and
compared with what the machine has available. Too much: every rank raises MemoryError
naming the components, the units that set the step's peak, and the options that would fit
(docs/sharded.md, "Memory pre-flight"). Activations are not counted (they need a batch: estimate_memory)."""

from .. import memory as _memory
from . import _units

# The components, in the order the message lists them.
PARTS = ("parameters", "gradients", "optimizer_state", "gathered_parameters",
         "gradients_in_flight", "allocator_slack")
# What glibc and torch keep beyond the tensors counted: measured on GPTs of 40 M to 100 M
# parameters sharded over 4 ranks (tied 50k vocabularies and a 5k one, with and without
# HEFT_SDP_MMAP_THRESHOLD), the peak above the process's resident set before construction
# was 0.76-0.95 of the tensors counted; 10% of them plus 64 MiB puts the prediction within
# 11% of every one (docs/sharded.md, "Memory pre-flight").
SLACK_SHARE, SLACK_FIXED = 0.10, 64 << 20


class _Unit:
    """A unit's sizes: elements (padded to the shard degree), its largest parameter, and
    whether it trains."""

    def __init__(self, spec, degree):
        self.name = spec.name or "(root)"
        self.numel = sum(p.numel() for p in spec.params)
        self.shard = (max(self.numel, 1) + degree - 1) // degree
        self.padded = self.shard * degree
        self.largest_param = max((p.numel() for p in spec.params), default=0)
        self.trainable = any(p.requires_grad for p in spec.params)
        names = [places[0].name for places in spec.slots]
        self.members = ", ".join(names[:4]) + (f" and {len(names) - 4} more"
                                               if len(names) > 4 else "")


def plan(specs, degree, compute_dtype, reduce_dtype, optimizer, *, zero_stage=3,
         reductions_in_flight=2):
    """{component: bytes} one rank adds to train the units `specs` (_units.UnitSpec, the root
    first) sharded over `degree` ranks, and the units that set the step's peaks. The step's
    peaks follow the wrapper: the root unit stays gathered for the whole step; in forward
    the unit that runs and the next (prefetched) are gathered, in backward the unit whose
    backward runs and the previous; each unit's gradients are added into one flat gradient
    as they arrive (one parameter's gradient beside it at a time), which goes to a
    reduce-scatter that holds it (in the reduce dtype) until it completes, at most
    `reductions_in_flight` at once. zero_stage=2 keeps every unit gathered from its forward
    to its backward."""
    per_element, per_tensor = _memory.optimizer_state_of(optimizer)
    units = [_Unit(s, degree) for s in specs]
    root, rest = units[0], units[1:]
    cb, rb = compute_dtype.itemsize, reduce_dtype.itemsize
    shards = sum(u.shard for u in units) * 4
    trainable = [u for u in units if u.trainable]
    grads = sum(u.shard for u in trainable) * 4
    biggest = max(rest, key=lambda u: u.padded, default=None)
    big = biggest.padded if biggest else 0
    if zero_stage == 2:
        gathered = sum(u.padded for u in units) * cb
    else:
        gathered = (root.padded + 2 * big) * cb
    # The flat gradient being filled and the parameter gradient being added into it: a
    # block's in its backward, or the root's at the end (a tied embedding's).
    filling = max((biggest.padded + biggest.largest_param) if biggest else 0,
                  root.padded + root.largest_param if root.trainable else 0) * cb
    in_flight = filling + reductions_in_flight * big * rb
    parts = {
        "parameters": shards,
        "gradients": grads,
        "optimizer_state": per_element * grads + per_tensor * len(trainable),
        "gathered_parameters": gathered,
        "gradients_in_flight": in_flight,
    }
    parts["allocator_slack"] = int(SLACK_SHARE * sum(parts.values())) + SLACK_FIXED
    return parts, root, biggest


def _gb(n):
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _describe(parts, root, biggest, optimizer):
    """The components as text, and what sets the step's peak (the units)."""
    names = {"optimizer_state": f"{optimizer} state"}
    text = ", ".join(f"{names.get(k, k.replace('_', ' '))} {_gb(v)}" for k, v in parts.items())
    peak = (f"the step's gathered parameters and gradients in flight are set by the root unit "
            f"({root.numel:,} parameters: {root.members}; gathered for the whole step)")
    if biggest is not None:
        peak += f" and the largest other unit, {biggest.name!r} ({biggest.numel:,})"
    return text, peak


def check(module, specs, degree, compute_dtype, reduce_dtype, optimizer, *, zero_stage,
          reductions_in_flight, options):
    """Raises MemoryError, on every rank alike (one all-gather over the default group when
    there is one: every rank must construct its ShardedDataParallel), when the ranks of a
    machine would need more than it has available. `options`: [(label, price)], where
    price() gives the parts of an alternative (mixed_precision, units, sharded_degree); the
    message names those that fit. Returns the parts (bytes per component)."""
    parts, root, biggest = plan(specs, degree, compute_dtype, reduce_dtype, optimizer,
                                zero_stage=zero_stage,
                                reductions_in_flight=reductions_in_flight)
    need = sum(parts.values())
    machines = _memory.machines_needing(need)
    short = [m for m in machines if m[2] > m[1]]
    if not short:
        return parts
    ranks, available, total = short[0]
    where = "this machine" if short[0] is machines[0] else "another machine of the job"
    text, peak = _describe(parts, root, biggest, optimizer)
    name = type(module).__name__
    message = (f"ShardedDataParallel: {name} ({_memory.parameter_count(module):,} parameters) "
               f"sharded over {degree} ranks needs {_gb(need)} more per rank before "
               f"activations ({text}; {peak}); the {ranks} rank(s) on {where} need "
               f"{_gb(total)} and {_gb(available)} is available (MemAvailable)")
    fits = []
    for label, change in options:
        try:
            alt = sum(change().values())
        except (ValueError, TypeError):
            continue
        if all(alt * r <= a for r, a, _ in short):
            fits.append(f"{label} ({_gb(alt)} per rank)")
    fewest = min(a // need for r, a, _ in short) if need else 0
    if fewest >= 1:
        fits.append(f"at most {fewest} rank(s) per machine (more machines)")
    if fits:
        message += ": it would fit with " + ", or ".join(fits)
    else:
        message += ": no option here fits (fewer ranks per machine, more machines)"
    raise MemoryError(message + ". Activations come on top; memory_check=False skips this "
                      "check.")


def auto_units(module, min_params):
    """The UnitSpecs the automatic policy gives at min_params (the root first)."""
    specs = _units.assign(module, _units.select_units(module, min_params))
    return specs[:1] + [s for s in specs[1:] if s.params]
