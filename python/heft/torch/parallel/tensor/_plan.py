"""How a tensor-parallel plan applies to a module, changing nothing: which modules its
patterns name, how each is cut and which head counts divide (plan_layers), and which of a
plan's patterns name a module (names_matching). Shared by tensor_parallel
(__init__.py), which then swaps the modules, Pipeline's tensor_plan (pipeline/_tensor.py),
which checks every chunk before anything is freed or split, and auto_layout (layout/), which
asks which tensor degrees a plan can split a model into."""
import fnmatch

import torch.nn as nn

from heft.torch import _c10d
from ._heads_attention import check as check_attention

_T = _c10d.parallel.tensor
STYLES = ("colwise", "rowwise", "vocab", "heads")
HEAD_ATTRS = ("heads", "n_head", "num_heads")


def module_names(module):
    """The names of module's submodules (named_modules order, the root left out)."""
    return [n for n, _ in module.named_modules() if n]


def names_matching(names, pattern):
    """The names a plan pattern (an fnmatch glob, case-sensitive) names."""
    return [n for n in names if fnmatch.fnmatchcase(n, pattern)]


def _matches(module, plan):
    """{name: (pattern, style)} of the modules the plan names, in named_modules order."""
    if not isinstance(plan, dict) or not plan:
        raise TypeError(f"tensor_parallel: plan={plan!r}: expected a non-empty dict of module-"
                        "name patterns to 'colwise', 'rowwise', 'vocab' or 'heads'")
    names = module_names(module)
    found = {}
    for pattern, style in plan.items():
        if not isinstance(pattern, str) or style not in STYLES:
            raise ValueError(f"tensor_parallel: plan pattern {pattern!r}: {style!r}: expected "
                             "a string pattern mapped to 'colwise', 'rowwise', 'vocab' or 'heads'")
        hit = names_matching(names, pattern)
        if not hit:
            raise ValueError(f"tensor_parallel: plan pattern {pattern!r} matches no module of "
                             f"the model (names look like {names[:3]})")
        for n in hit:
            if n in found and found[n][1] != style:
                raise ValueError(f"tensor_parallel: plan patterns {found[n][0]!r} "
                                 f"({found[n][1]}) and {pattern!r} ({style}) both match {n!r}")
            found.setdefault(n, (pattern, style))
    return {n: found[n] for n in names if n in found}


def _attention(modules, name, pattern, style):
    """True for 'heads' on an nn.MultiheadAttention it supports. ValueError for 'heads' on
    anything else, and for another style on an nn.MultiheadAttention or on its out_proj,
    which the attention uses without calling it (F.multi_head_attention_forward)."""
    m, parent = modules[name], name.rpartition(".")[0]
    owner = name if isinstance(m, nn.MultiheadAttention) else parent if (
        name.rpartition(".")[2] == "out_proj" and name != parent
        and isinstance(modules.get(parent), nn.MultiheadAttention)) else None
    if style == "heads":
        if not isinstance(m, nn.MultiheadAttention):
            raise ValueError(f"tensor_parallel: plan pattern {pattern!r} matches {name!r} "
                             f"({type(m).__name__}): 'heads' applies to nn.MultiheadAttention")
        check_attention(m, f"tensor_parallel: plan pattern {pattern!r}: {name!r}")
        return True
    if owner is not None:
        raise ValueError(f"tensor_parallel: plan pattern {pattern!r} matches {name!r}: "
                         f"nn.MultiheadAttention {owner!r} computes with its fused "
                         "in_proj_weight and out_proj.weight itself, never calling out_proj, so "
                         f"{style!r} cannot split it; plan {owner!r}: 'heads' (its heads split "
                         "over the ranks: in_proj by heads, out_proj rowwise), or leave it whole")
    return False


def _check_types(modules, found):
    for name, (pattern, style) in found.items():
        m = modules[name]
        if _attention(modules, name, pattern, style):
            continue
        ok = isinstance(m, nn.Linear) or (style == "vocab" and isinstance(m, nn.Embedding))
        if not ok or type(m) not in (nn.Linear, nn.Embedding):
            want = "nn.Linear or nn.Embedding" if style == "vocab" else "nn.Linear"
            raise ValueError(f"tensor_parallel: plan pattern {pattern!r} matches {name!r} "
                             f"({type(m).__name__}): {style!r} applies to {want}")
        if isinstance(m, nn.Embedding) and (m.padding_idx is not None or m.max_norm is not None
                                            or m.scale_grad_by_freq or m.sparse):
            raise ValueError(f"tensor_parallel: plan pattern {pattern!r}: {name!r} uses "
                             "padding_idx, max_norm, scale_grad_by_freq or sparse, which 'vocab' "
                             "does not support")


def _head_owner(modules, name):
    """(module name, attribute) of the nearest enclosing module with a head count, or None."""
    parts = name.split(".")[:-1]
    while True:
        owner = modules[".".join(parts)]
        for attr in HEAD_ATTRS:
            if isinstance(getattr(owner, attr, None), int):
                return ".".join(parts), attr
        if not parts:
            return None
        parts.pop()


def _colwise_run(linears, style, i, pattern):
    """The colwise layers just before rowwise linears[i], in order; ValueError without."""
    run = []
    for before in reversed(linears[:i]):
        if style[before] != "colwise":
            break
        run.insert(0, before)
    if not run:
        prior = f"follows {linears[i - 1]!r}, which is not colwise" if i else \
            "is the model's first nn.Linear"
        raise ValueError(f"tensor_parallel: plan pattern {pattern!r}: rowwise {linears[i]!r} has "
                         f"no colwise input ({prior}); a rowwise layer takes the split output "
                         "of the colwise layer(s) just before it")
    return run


def _pair(modules, found, run, name, size):
    """Checks colwise `run` feeding rowwise `name`: (fused q/k/v?, {head owner: (pattern,
    count / T)}), the owner the nearest module with a head count above an attention."""
    pattern, row = found[name][0], modules[name]
    outs = [modules[c].out_features for c in run]
    fused = len(run) == 1 and outs[0] == 3 * row.in_features
    if not fused and any(o != row.in_features for o in outs):
        raise ValueError(f"tensor_parallel: plan pattern {pattern!r}: rowwise {name!r} takes "
                         f"{row.in_features} input features but the colwise {run[-1]!r} before "
                         f"it gives {outs[-1]}")
    _T.split_size(row.in_features, size,
                  f"tensor_parallel: plan pattern {pattern!r}: {name!r} input features")
    first = found[run[0]][0]
    owner = _head_owner(modules, run[0]) if fused or len(run) == 3 else None
    if fused and owner is None:
        raise ValueError(f"tensor_parallel: plan pattern {first!r}: {run[0]!r} gives 3 x "
                         f"{row.in_features} features, a fused q/k/v projection, but no "
                         f"enclosing module has an attribute {', '.join(HEAD_ATTRS)}")
    if owner is None:
        return fused, {}
    label = f"{owner[0]}.{owner[1]}" if owner[0] else owner[1]
    count = _T.split_size(getattr(modules[owner[0]], owner[1]), size,
                          f"tensor_parallel: plan pattern {first!r}: {label}")
    return fused, {owner: (first, count)}


def plan_layers(module, plan, size):
    """The layers to build, [(name, pattern, style, parts, gather)], and the head counts to
    divide, {(owner, attribute): (pattern, new count)}; ValueError naming the pattern that
    cannot be honoured. Changes nothing."""
    modules = dict(module.named_modules())
    found = _matches(module, plan)
    _check_types(modules, found)
    linears = [n for n, m in modules.items() if n and isinstance(m, nn.Linear)]
    style = {n: found.get(n, (None, None))[1] for n in linears}
    parts, paired, heads = {n: 1 for n in found}, set(), {}
    for i, name in enumerate(linears):
        if style[name] == "rowwise":
            run = _colwise_run(linears, style, i, found[name][0])
            fused, owner = _pair(modules, found, run, name, size)
            heads.update(owner)
            paired.update(run)
            parts.update({c: 3 if fused else 1 for c in run})
    layers = []
    for name, (pattern, st) in found.items():
        m = modules[name]
        if st == "heads":  # nn.MultiheadAttention, split by heads (_heads_attention.py)
            _T.split_size(m.num_heads, size,
                          f"tensor_parallel: plan pattern {pattern!r}: {name!r} num_heads")
            layers.append((name, pattern, st, 1, False))
            continue
        n = m.num_embeddings if isinstance(m, nn.Embedding) else \
            m.in_features if st == "rowwise" else m.out_features // parts[name]
        what = {"colwise": "output features", "rowwise": "input features",
                "vocab": "vocabulary rows"}[st]
        _T.split_size(n, size, f"tensor_parallel: plan pattern {pattern!r}: {name!r} {what}")
        layers.append((name, pattern, st, parts[name], st == "colwise" and name not in paired))
    return layers, heads
