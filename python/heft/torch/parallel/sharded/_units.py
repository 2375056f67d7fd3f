"""Which sub-modules of a model become sharding units, and which parameters each unit owns
(heft.torch.parallel.ShardedDataParallel's module surgery; no collectives here).

A unit is a sub-module whose parameters are flattened into one flat parameter and sharded.
Units may nest: a unit owns the parameters of its subtree that no inner unit owns. A
parameter registered in several places (tied weights) belongs to the innermost unit whose
subtree holds every place it is registered; none: the root unit (the whole model)."""
import torch

# The automatic policy aims at about this many units (FSDP's size-based auto wrap, with
# the threshold taken from the model's size instead of a fixed 1e8).
AUTO_UNITS = 8
# Modules whose forward reads their children's parameters without calling the children
# (nn.MultiheadAttention passes out_proj.weight to F.multi_head_attention_forward): a child
# of one never becomes a unit, whose gather would run in a forward hook that never fires
# (FSDP's size-based policy forces these to be leaves likewise). A module class says it is
# one with a true `_heft_leaf` (tensor_parallel's HeadsAttention).
LEAVES = (torch.nn.MultiheadAttention,)


def _leaf(module):
    return isinstance(module, LEAVES) or getattr(module, "_heft_leaf", False) is True


class Slot:
    """One place a parameter is registered: module.<attr>."""
    __slots__ = ("module", "attr", "name")

    def __init__(self, module, attr, name):
        self.module, self.attr, self.name = module, attr, name


class UnitSpec:
    """A unit before sharding: its module and qualified name ("" for the root), the unique
    parameters it owns in registration order, and every slot of each."""

    def __init__(self, name, module):
        self.name, self.module = name, module
        self.params = []  # torch.nn.Parameter, unique
        self.slots = []   # per param: [Slot]


def _count(module):
    return sum(p.numel() for p in module.parameters())


def _auto_units(root, min_params):
    """Post-order: a module becomes a unit once the parameters below it that no inner unit
    took reach min_params (the root never: it is the root unit)."""
    chosen = []

    def visit(name, module):
        if _leaf(module):
            free = _count(module)
            if module is not root and free >= min_params:
                chosen.append((name, module))
                return 0
            return free
        free = sum(p.numel() for p in module._parameters.values() if p is not None)
        for child_name, child in module._modules.items():
            if child is not None:
                free += visit(f"{name}.{child_name}" if name else child_name, child)
        if module is not root and free >= min_params:
            chosen.append((name, module))
            return 0
        return free

    visit("", root)
    return chosen


def select_units(root, units):
    """[(qualified name, module)] of the unit modules, in module order (outer first).
    units: None (automatic), an int (the automatic policy's minimum parameters per unit),
    a list/tuple of module classes, or a callable (name, module) -> bool. A module inside
    a leaf (LEAVES, _heft_leaf) is never chosen (its parameters stay with the enclosing
    unit)."""
    named = list(root.named_modules())
    if units is None or (isinstance(units, int) and not isinstance(units, bool)):
        total = _count(root)
        if isinstance(units, int) and units < 1:
            raise ValueError(f"ShardedDataParallel: units={units}: the automatic policy's "
                             "minimum parameters per unit must be at least 1")
        min_params = units if units is not None else max(1, total // AUTO_UNITS)
        picked = {id(m) for _, m in _auto_units(root, min_params)}
        return [(n, m) for n, m in named if id(m) in picked]
    if isinstance(units, (list, tuple, set)):
        classes = tuple(units)
        bad = [c for c in classes if not (isinstance(c, type) and issubclass(c, torch.nn.Module))]
        if bad or not classes:
            raise TypeError(f"ShardedDataParallel: units={units!r}: expected module classes "
                            "(subclasses of torch.nn.Module), a callable (name, module) -> bool, "
                            "an int or None")
        match = lambda n, m: isinstance(m, classes)  # noqa: E731
    elif callable(units):
        match = units
    else:
        raise TypeError(f"ShardedDataParallel: units={units!r}: expected None, an int, a list of "
                        "module classes or a callable (name, module) -> bool")
    inside = {id(c) for _, m in named if _leaf(m) for c in m.modules() if c is not m}
    chosen = [(n, m) for n, m in named if m is not root and id(m) not in inside and match(n, m)]
    if not chosen:
        raise ValueError(f"ShardedDataParallel: units={units!r} matches no sub-module of "
                         f"{type(root).__name__} (the root itself never counts)")
    return chosen


def _inside(name, unit_name):
    return unit_name == "" or name == unit_name or name.startswith(unit_name + ".")


def assign(root, unit_modules):
    """The UnitSpecs: [root] + the units, each with the parameters it owns. Throws for a
    parameter that is not floating point, naming it."""
    specs = [UnitSpec("", root)] + [UnitSpec(n, m) for n, m in unit_modules]
    slots, order = {}, []
    for mod_name, module in root.named_modules(remove_duplicate=False):
        for attr, p in module._parameters.items():
            if p is None:
                continue
            name = f"{mod_name}.{attr}" if mod_name else attr
            if not p.is_floating_point():
                raise TypeError(f"ShardedDataParallel: module: parameter {name!r} is "
                                f"{p.dtype}; only floating-point parameters can be sharded")
            if id(p) not in slots:
                slots[id(p)] = (p, [])
                order.append(id(p))
            if not any(s.module is module and s.attr == attr for s in slots[id(p)][1]):
                slots[id(p)][1].append(Slot(module, attr, name))
    for key in order:
        p, places = slots[key]
        owner = specs[0]
        for spec in specs[1:]:  # outer units come first: the last fit is the innermost
            if all(_inside(s.name.rpartition(".")[0], spec.name) for s in places):
                owner = spec
        owner.params.append(p)
        owner.slots.append(places)
    return specs
