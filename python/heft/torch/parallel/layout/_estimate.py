"""heft.torch.parallel.estimate_memory's result (estimate_memory itself is in __init__, beside
the measurement it runs): a rank's peak memory for one layout of a model, by
component, from a short measurement of the model on this process (heft-train's C++
measurement, model_measure.h: the bytes each layer's forward keeps for the backward, the loss's
transient bytes, the optimizer's step, the runtime's resident bytes) priced by the C++ memory
model the layout search uses (layout_search.h evaluate: the same prediction heft-train's
auto layout and `heft plan` make). MemoryEstimate.require() refuses, before training starts,
a layout the ranks of this machine cannot hold, naming the largest component and a layout that
would fit."""
from dataclasses import dataclass, field

from ..memory import _machines, available_bytes

# The layout's fields and their defaults (LayoutPlan's names).
LAYOUT_FIELDS = {"data": 1, "sharded": 1, "tensor": 1, "pipeline": 1, "microbatches": 1,
                 "virtual_stages": 1, "checkpointing": False}
# What each component is (layout_search.h Prediction::memory_parts).
PART_MEANING = {
    "parameters": "the rank's parameters (1/S of them when sharded)",
    "gradients": "their gradients",
    "optimizer_state": "the optimizer's state for them",
    "gradient_buffers": "communication buffers: DDP's bucket copy of the gradients; sharded: "
                        "the full-size gradients before their reduce-scatters",
    "gathered_parameters": "sharded: two layers' full parameters gathered at once",
    "activations": "what the forward keeps for the backward (micro-batches in flight)",
    "loss_transient": "the loss's buffers, with what the allocator keeps of them",
    "backward_temporaries": "the backward's fresh gradient of the largest tensor",
    "step_temporaries": "the gradient norm's and the optimizer step's temporaries",
    "runtime": "torch, heft's communicator and what the measurement left resident",
    "profile_floor": "what the measurement's own peak exceeds the rest by",
}


def _gb(n):
    return f"{n / 1e9:.2f} GB"


@dataclass
class MemoryEstimate:
    """One rank's predicted peak resident bytes (`total_bytes`, the largest pipeline stage's)
    and its components (`parts`: name -> bytes, summing to total_bytes; PART_MEANING says what
    each is), for `layout` (data, sharded, tensor, pipeline, microbatches, virtual_stages,
    checkpointing, and `text`)."""
    layout: dict
    total_bytes: int
    parts: dict
    optimizer: str
    rows: list = field(default_factory=list, repr=False)
    options: dict = field(default_factory=dict, repr=False)
    comm: list = field(default_factory=list, repr=False)

    def largest_part(self):
        """(name, bytes) of the largest component."""
        return max(self.parts.items(), key=lambda kv: kv[1])

    def describe(self):
        """A table: each component's bytes and share of the total."""
        lines = [f"memory per rank for {self.layout['text']} ({self.optimizer}): "
                 f"{_gb(self.total_bytes)}"]
        for name, b in self.parts.items():
            if b:
                lines.append(f"  {name:<21} {_gb(b):>10}  {100 * b / max(1, self.total_bytes):5.1f}%")
        return "\n".join(lines)

    def require(self, available=None, *, ranks=None, what=None):
        """Raises MemoryError when the ranks of a machine cannot hold this estimate: with a
        default process group, collective (one all-gather of each rank's machine and available
        memory, every rank deciding alike, as require_memory); else `ranks` (default
        LOCAL_WORLD_SIZE) on this machine with `available` bytes (default: what it has
        available now). The message names `what`, the layout, the need, the largest
        component, what is available and the layout of the same world that needs least (or
        that none fits). Returns total_bytes."""
        if available is not None or ranks is not None:
            machines = [(int(ranks or 1), int(available if available is not None else available_bytes()))]
        else:
            machines = _machines()
        short = [m for m in machines if self.total_bytes * m[0] > m[1]]
        if not short:
            return self.total_bytes
        ranks, avail = short[0]
        name, part = self.largest_part()
        world = 1
        for k in ("data", "sharded", "tensor", "pipeline"):
            world *= self.layout[k]
        message = (f"{what or 'estimate_memory'}: {self.layout['text']} needs "
                   f"{_gb(self.total_bytes)} per rank (largest: {name}, {_gb(part)}: "
                   f"{PART_MEANING.get(name, name)}); the {ranks} rank(s) on this machine need "
                   f"{_gb(self.total_bytes * ranks)} and {_gb(avail)} is available")
        raise MemoryError(message + "; " + self._way_out(world, avail // ranks))

    def _way_out(self, world, per_rank):
        """The layout of `world` ranks that fits `per_rank` bytes (the search's fastest of
        those), or the smallest any needs."""
        from heft.torch import _c10d
        options = dict(self.options, world=world, memory_limit=int(per_rank),
                       microbatches=[1, 2, 4, 8], virtual_stages=[1], checkpointing=[False, True])
        try:
            best = _c10d.parallel.layout.search(self.rows, self.comm, options)["ranked"][0]
        except ValueError as e:
            return f"no layout of {world} ranks fits: {e}"
        return (f"{best['layout']['text']} would fit ({_gb(best['memory_bytes'])} per rank); "
                "or use more ranks on more machines")


def _layout_dict(layout, world):
    """The layout as a dict of LAYOUT_FIELDS from a LayoutPlan, a dict, or "ddp"/"sharded"
    over `world` ranks."""
    if isinstance(layout, str):
        if layout not in ("ddp", "sharded"):
            raise ValueError(f"estimate_memory: layout={layout!r}: expected 'ddp', 'sharded', "
                             "a dict of degrees or a LayoutPlan")
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValueError(f"estimate_memory: world={world!r}: expected a positive integer "
                             f"with layout={layout!r}")
        return dict(LAYOUT_FIELDS, **({"data": world} if layout == "ddp" else {"sharded": world}))
    if hasattr(layout, "microbatches") and hasattr(layout, "sharded"):  # a LayoutPlan
        return {k: getattr(layout, k) for k in LAYOUT_FIELDS}
    if not isinstance(layout, dict):
        raise ValueError(f"estimate_memory: layout={layout!r}: expected 'ddp', 'sharded', a "
                         "dict of degrees or a LayoutPlan")
    unknown = sorted(set(layout) - set(LAYOUT_FIELDS))
    if unknown:
        raise ValueError(f"estimate_memory: layout key {unknown[0]!r}: expected one of "
                         f"{', '.join(LAYOUT_FIELDS)}")
    out = dict(LAYOUT_FIELDS, **layout)
    for k in LAYOUT_FIELDS:
        if k != "checkpointing" and (isinstance(out[k], bool) or not isinstance(out[k], int) or out[k] < 1):
            raise ValueError(f"estimate_memory: layout {k}={out[k]!r}: expected a positive integer")
    return out
