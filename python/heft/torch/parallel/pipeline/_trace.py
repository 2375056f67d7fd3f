"""The user's model as heft's Pipeline takes it: a sequence of layers, each taking the one
tensor the previous one returns. An nn.Sequential is its children; any other module is traced
by torch.fx and cut where exactly one value is alive between the operations before and after
(a residual connection keeps its block whole), each piece holding at least one of the model's
submodules. The pieces are fx GraphModules over the model's own submodules (the same
parameter objects: an optimizer made on model.parameters() trains them), so their
state_dict keys are the model's."""
import torch


def _fail(model, why, who):
    return ValueError(f"{who}: {type(model).__name__} cannot be cut into layers: {why}")


def _cuts(nodes):
    """Indices i after which only nodes[i]'s value is alive (and it is a computed value)."""
    order = {n: i for i, n in enumerate(nodes)}
    last_use = {n: max((order[u] for u in n.users), default=order[n]) for n in nodes}
    alive, cuts = set(), []
    for i, n in enumerate(nodes):
        if n.op not in ("get_attr", "output") and last_use[n] > i:
            alive.add(n)
        alive = {a for a in alive if last_use[a] > i}
        if n.op in ("call_module", "call_function", "call_method") and alive == {n}:
            cuts.append(i)
    return cuts


def _piece(gm, nodes, source, result, name):
    """A GraphModule of nodes (one input: source's value) returning result's value."""
    graph = torch.fx.Graph()
    env = {source: graph.placeholder("x")}

    def arg(a):
        if a not in env:  # a constant or parameter read by this piece: read it here too
            assert a.op == "get_attr", a
            env[a] = graph.node_copy(a)
        return env[a]

    for n in nodes:
        for a in n.all_input_nodes:
            arg(a)
        env[n] = graph.node_copy(n, arg)
    graph.output(arg(result))
    return torch.fx.GraphModule(gm, graph, class_name=name)


def traced_layers(model, who="heft.torch.parallel"):
    """[(layer, module_names)]: the model as heft's Pipeline runs it, with the qualified
    names of the model's submodules each layer calls (for smp.partition). `who` begins the
    ValueError raised when the model cannot be cut (smp.DistributedModel, estimate_memory)."""
    if isinstance(model, torch.nn.Sequential):
        return [(layer, [name]) for name, layer in model.named_children()]
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as e:  # fx raises several kinds for code it cannot follow
        raise _fail(model, f"torch.fx cannot trace its forward ({type(e).__name__}: {e}); "
                           "write it as an nn.Sequential", who) from None
    nodes = list(gm.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise _fail(model, f"its forward takes {len(inputs)} inputs "
                           f"({', '.join(n.target for n in inputs)}); heft's pipeline passes one "
                           "tensor into the model and between its stages", who)
    output = next(n for n in nodes if n.op == "output")
    if not isinstance(output.args[0], torch.fx.Node):
        raise _fail(model, "its forward returns a tuple or dict; heft's pipeline passes one "
                           "tensor between stages and out of the last", who)
    body = [n for n in nodes if n.op not in ("placeholder", "output", "get_attr")]
    cuts, order = set(_cuts(nodes)), {n: i for i, n in enumerate(nodes)}
    pieces, current, modules, source = [], [], [], inputs[0]
    for n in body:
        current.append(n)
        if n.op == "call_module":
            modules.append(n.target)
        if order[n] in cuts and modules:
            pieces.append((current, modules, source))
            current, modules, source = [], [], n
    if current:  # operations after the last cut: they join the last piece
        if pieces:
            last, names, first = pieces.pop()
            pieces.append((last + current, names + modules, first))
        else:
            pieces.append((current, modules, source))
    if not pieces:
        raise _fail(model, "its forward calls no submodule", who)
    out = []
    for k, (piece_nodes, names, first) in enumerate(pieces):
        result = output.args[0] if k == len(pieces) - 1 else piece_nodes[-1]
        label = names[0] if names else "ops"
        out.append((_piece(gm, piece_nodes, first, result, label.replace(".", "_")), names))
    return out
