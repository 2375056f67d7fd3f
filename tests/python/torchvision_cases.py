"""torchvision's models (Debian's python3-torchvision) and the cases of
torchvision_models_test.py: each builds a model nobody on this team wrote, trains it a few
steps under one heft.torch.parallel strategy and beside one process running the unwrapped
model on the same global batch, and returns the largest differences as a JSON-able row."""
import os

CLASSES, IMAGE = 10, 32
SDP_TOL = 1e-5   # relative, losses and per tensor (norm of the difference over the norm)
BF16_TOL = 5e-2  # the losses computing in bf16 against one process in fp32
PP_TOL = 1e-5
TP_TOL = 1e-5
VIT = dict(image_size=IMAGE, patch_size=8, num_layers=4, num_heads=4, hidden_dim=64,
           mlp_dim=128, num_classes=CLASSES)
VIT_MLP_PLAN = {"encoder.layers.*.mlp.0": "colwise", "encoder.layers.*.mlp.3": "rowwise"}
VIT_PLAN = dict(VIT_MLP_PLAN, **{"encoder.layers.*.self_attention": "heads"})


def batch(step, lo, hi, total):
    """Images and labels lo..hi of a global batch of `total` that depends only on step."""
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(total, 3, IMAGE, IMAGE, generator=g)
    y = torch.randint(0, CLASSES, (total,), generator=g)
    return x[lo:hi], y[lo:hi]


def resnet(norm):
    import torch
    import torch.nn as nn
    from torchvision.models import resnet18
    torch.manual_seed(7)
    if norm == "group":
        model = resnet18(num_classes=CLASSES, norm_layer=lambda c: nn.GroupNorm(32, c))
    else:
        model = resnet18(num_classes=CLASSES)
        model.eval()  # BatchNorm normalises by its running statistics: per sample
    return model


def vit():
    import torch
    from torchvision.models.vision_transformer import VisionTransformer
    torch.manual_seed(11)
    return VisionTransformer(**VIT)


def sgd(params):
    """SGD with momentum: an update linear in the gradient (Adam would turn the rounding noise
    of a gradient that is exactly zero in theory, such as the key bias of attention, into
    steps of the full learning rate, differently in each summation order)."""
    import torch
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def reference_step(ref, opt, x, y):
    """One step of the one-process reference on the global batch; its loss."""
    import torch.nn.functional as F
    opt.zero_grad()
    loss = F.cross_entropy(ref(x), y)
    loss.backward()
    opt.step()
    return loss


def relative(a, b):
    import torch
    if isinstance(a, torch.Tensor):
        a, b = a.double(), b.double()
        return float((a - b).norm() / b.norm().clamp_min(1e-30))
    return abs(a - b) / max(abs(b), 1e-30)


def worst(state, ref):
    """(largest relative difference, its key) over the tensors of two state_dicts."""
    return max(((relative(state[k], v) if v.is_floating_point() else
                 float(not bool((state[k] == v).all()))), k) for k, v in ref.items())


# ---- ShardedDataParallel ---------------------------------------------------------------------
def initial_bf16(make, model, x):
    """The wrapped bf16 model's output at initialisation against one process's model cast to
    bf16 by hand, its BatchNorms left in fp32 (what the wrapper computes): relative."""
    import torch
    plain = make()
    for m in plain.modules():
        if not isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            for p in m.parameters(recurse=False):
                p.data = p.data.bfloat16()
    with torch.no_grad():
        return relative(model(x).float(), plain(x.bfloat16()).float())


def sharded_case(name, make, units=None, mixed=None, steps=3, total=4):
    import torch.distributed as dist
    import torch.nn.functional as F
    from heft.torch.parallel import (ShardedDataParallel, load_checkpoint,
                                     load_full_state_dict, save_checkpoint)
    rank, world = dist.get_rank(), dist.get_world_size()
    ref = make()
    ref_opt = sgd(ref.parameters())
    model = ShardedDataParallel(make(), units=units, mixed_precision=mixed)
    opt = sgd(model.parameters())
    per, loss_diff = total // world, 0.0
    first = initial_bf16(make, model, batch(0, 0, total, total)[0]) if mixed else 0.0
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        ref_loss = reference_step(ref, ref_opt, x, y)
        opt.zero_grad()
        mine = slice(rank * per, (rank + 1) * per)
        loss = F.cross_entropy(model(x[mine]).float(), y[mine])
        loss.backward()
        opt.step()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean)
        loss_diff = max(loss_diff, relative(mean.item() / world, ref_loss.item()))
    plain = ref.state_dict()
    state = model.full_state_dict()
    directory = os.path.join(os.environ["HEFT_TV_DIR"], "sdp-" + name.replace(" ", "-"))
    save_checkpoint(directory, model, opt)
    saved = load_full_state_dict(directory)
    fresh = ShardedDataParallel(make(), units=units)
    load_checkpoint(directory, fresh, sgd(fresh.parameters()))
    loaded = fresh.full_state_dict()
    return {"case": f"sharded {name}", "tolerance": BF16_TOL if mixed else SDP_TOL,
            "loss": loss_diff, "first": first,
            "keys": [sorted(s) == sorted(plain) for s in (state, saved, loaded)],
            "state": worst(state, plain), "checkpoint": worst(saved, state),
            "loaded": worst(loaded, state), "units": len(model.units),
            "buffers": sum(1 for k in plain if "running" in k or "batches" in k)}


def deferred_case():
    """resnet18 (BatchNorm, GroupNorm) and the ViT built under deferred_init (meta tensors;
    each rank replays its shard): the wrapped model's full state at the start equals one
    process's model, parameters and buffers."""
    from heft.torch.parallel import ShardedDataParallel, deferred_init
    rows = {}
    for name, make in (("resnet18 batch", lambda: resnet("batch")),
                       ("resnet18 group", lambda: resnet("group")), ("vit", vit)):
        with deferred_init():
            module = make()
        meta = all(p.is_meta for p in module.parameters())
        full, plain = ShardedDataParallel(module).full_state_dict(), make().state_dict()
        rows[name] = [meta, sorted(full) == sorted(plain), worst(full, plain)]
    return {"case": "sharded deferred_init", "models": rows}


# ---- Pipeline --------------------------------------------------------------------------------
def resnet_sequence():
    import torch.nn as nn
    m = resnet("batch")
    return nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3,
                         m.layer4, m.avgpool, nn.Flatten(1), m.fc).eval()


def vit_sequence():
    """torchvision's VisionTransformer as a sequence of its own modules and parameters, the
    glue (_process_input, the class token, the first row) as small layers."""
    import torch
    import torch.nn as nn
    v = vit()

    class Patches(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv_proj = v.conv_proj

        def forward(self, x):
            x = self.conv_proj(x)
            return x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)

    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.class_token, self.pos_embedding = v.class_token, v.encoder.pos_embedding
            self.dropout = v.encoder.dropout

        def forward(self, x):
            x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
            return self.dropout(x + self.pos_embedding)

    class First(nn.Module):
        def forward(self, x):
            return x[:, 0]

    return nn.Sequential(Patches(), Tokens(), *v.encoder.layers, v.encoder.ln, First(),
                         v.heads), v


def pipeline_case(name, make, partition, mesh, steps=3, total=8, micro=4):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from heft.torch.parallel import Pipeline
    ref = make()
    ref_opt = sgd(ref.parameters())
    model = make()
    kwargs = {"example_input": batch(0, 0, total // micro, total)[0]} if partition == "auto" else {}
    pipe = Pipeline(model, mesh, microbatches=micro, partition=partition, **kwargs)
    params = list(pipe.parameters())
    opt = sgd(params) if params else None
    loss_diff = 0.0
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        ref_loss = reference_step(ref, ref_opt, x, y)
        if opt:
            opt.zero_grad()
        loss = pipe.step(x, y, F.cross_entropy)
        if opt:
            opt.step()
        loss_diff = max(loss_diff, relative(loss, ref_loss.item()))
    mine = [p.detach() for c in pipe.chunks for p in c.parameters()]
    theirs = [p.detach() for a, b in pipe.layer_ranges for i in range(a, b)
              for p in ref[i].parameters()]
    x, _ = batch(99, 0, total, total)
    with torch.no_grad():
        expected = ref.eval()(x)
    out = {"case": f"pipeline {name} partition={partition}", "tolerance": PP_TOL,
           "loss": loss_diff, "layers": pipe.layer_ranges, "stage": pipe.stage,
           "params": max([relative(a, b) for a, b in zip(mine, theirs)] + [0.0]),
           "held": [len(mine), len(theirs)], "evaluate": relative(pipe.evaluate(x), expected)}
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, out)
    return {"case": out["case"], "tolerance": PP_TOL, "ranks": rows}


# ---- tensor_parallel -------------------------------------------------------------------------
def refusals(mesh):
    """{what: message} of the plans that split an nn.MultiheadAttention as nn.Linear."""
    from heft.torch.parallel import tensor_parallel
    refused = {}
    for what, plan in (("attention", {"encoder.layers.*.self_attention": "colwise"}),
                       ("out_proj", {"encoder.layers.*.self_attention.out_proj": "rowwise"}),
                       ("heads on a Linear", {"encoder.layers.*.mlp.0": "heads"})):
        try:
            tensor_parallel(vit(), plan, mesh)
            refused[what] = None
        except ValueError as e:
            refused[what] = str(e)
    return refused


def tensor_case(mesh, name, plan, steps=3, total=4):
    import torch.nn.functional as F
    from heft.torch import _c10d
    from heft.torch.parallel import full_state_dict, tensor_parallel
    ref, tp = vit(), tensor_parallel(vit(), plan, mesh)
    opts = [sgd(m.parameters()) for m in (ref, tp)]
    loss_diff, counts = 0.0, []
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        losses = []
        for model, opt in zip((ref, tp), opts):
            _c10d.parallel.tensor.reset_counters()
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        c = _c10d.parallel.tensor.counters()
        counts.append([c["forward_allreduces"], c["backward_allreduces"]])
        loss_diff = max(loss_diff, relative(losses[1], losses[0]))
    full, plain = full_state_dict(tp), ref.state_dict()
    block = tp.encoder.layers[0]
    attention = block.self_attention
    return {"case": f"tensor_parallel vit T2 ({name})", "tolerance": TP_TOL, "loss": loss_diff,
            "keys": [sorted(full) == sorted(plain)], "state": worst(full, plain),
            "counts": counts, "layers": VIT["num_layers"],
            "held": {"mlp.0": list(block.mlp[0].weight.shape),
                     "in_proj": list(attention.in_proj_weight.shape),
                     "out_proj": list(attention.out_proj.weight.shape),
                     "heads": attention.num_heads, "type": type(attention).__name__},
            "refused": refusals(mesh) if name == "MLPs" else {}}


def attention(batch_first):
    """A seeded nn.MultiheadAttention of 4 heads of width 4, with nonzero biases."""
    import torch
    import torch.nn as nn
    torch.manual_seed(5)
    module = nn.MultiheadAttention(16, 4, batch_first=batch_first)
    with torch.no_grad():
        module.in_proj_bias.normal_()
        module.out_proj.bias.normal_()
    return module


def attention_forms(mesh):
    """'heads' beyond the ViT's self-attention: nn.MultiheadAttention batch first or not,
    cross-attention with a key padding mask and a per-head float mask, a causal bool mask
    with per-head weights; the largest difference of the output, the weights and the input
    gradients from the unsplit module's."""
    import torch
    import torch.nn as nn
    from heft.torch.parallel import tensor_parallel
    largest = 0.0
    for batch_first in (True, False):
        full = attention(batch_first)
        part = tensor_parallel(nn.Sequential(attention(batch_first)), {"0": "heads"}, mesh)[0]
        shape = (lambda n, t: (n, t, 16)) if batch_first else (lambda n, t: (t, n, 16))
        x, memory = torch.randn(shape(3, 5)), torch.randn(shape(3, 7))
        padding = torch.zeros(3, 7, dtype=torch.bool)
        padding[0, -2:] = True
        causal = torch.ones(5, 7, dtype=torch.bool).triu(1)
        for args, kwargs in (((x, x, x), {}),
                             ((x, memory, memory), {"key_padding_mask": padding,
                                                    "attn_mask": torch.randn(3 * 4, 5, 7)}),
                             ((x, memory, memory), {"attn_mask": causal,
                                                    "average_attn_weights": False})):
            results = []
            for module in (full, part):
                inputs = [a.clone().requires_grad_() for a in args]
                out, weights = module(*inputs, **kwargs)
                (out.square().sum() + weights.sum()).backward()
                results.append([out, weights, inputs[0].grad, inputs[1].grad])
            largest = max([largest] + [float((a - b).abs().max()) for a, b in zip(*results)])
    return {"case": "tensor_parallel MultiheadAttention forms", "tolerance": 1e-5,
            "largest": largest, "type": type(part).__name__}


def pipeline_tensor_case(mesh, steps=3, total=4, micro=2):
    """The ViT as a sequence on pipeline 2 x tensor 2 with the plan by layer index; every
    rank's losses, evaluate, and the checkpoint's full state against one process."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from heft.torch.parallel import Pipeline
    plan = {"*.self_attention": "heads", "*.mlp.0": "colwise", "*.mlp.3": "rowwise"}
    ref = vit_sequence()[0]
    ref_opt = sgd(ref.parameters())
    pipe = Pipeline(vit_sequence()[0], mesh, microbatches=micro, partition=[4],
                    tensor_plan=plan)
    opt = sgd(pipe.parameters())
    loss_diff = 0.0
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        ref_loss = reference_step(ref, ref_opt, x, y)
        opt.zero_grad()
        loss = pipe.step(x, y, F.cross_entropy)
        opt.step()
        loss_diff = max(loss_diff, relative(loss, ref_loss.item()))
    directory = os.path.join(os.environ["HEFT_TV_DIR"], "pipeline-tensor")
    pipe.save_checkpoint(directory, opt)
    full, plain = Pipeline.load_full_state_dict(directory), ref.state_dict()
    x, _ = batch(99, 0, total, total)
    with torch.no_grad():
        expected = ref.eval()(x)
    attention = [m for m in pipe.modules() if hasattr(m, "all_heads")]
    row = {"loss": loss_diff, "evaluate": relative(pipe.evaluate(x), expected),
           "keys": sorted(full) == sorted(plain), "state": worst(full, plain),
           "heads": sorted({(m.num_heads, m.all_heads) for m in attention})}
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    return {"case": "pipeline 2 x tensor 2 vit (MLPs and heads)", "tolerance": PP_TOL,
            "ranks": rows}


def tensor_sharded_case(mesh, steps=3, total=4):
    """The ViT split by VIT_PLAN over the tensor groups, then sharded over the data groups
    with small units (1000 parameters: every module that may be one is), 2 images per data
    rank; every step's loss (averaged over the data ranks) against one process."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from heft.torch.parallel import ShardedDataParallel, tensor_parallel
    ref = vit()
    ref_opt = sgd(ref.parameters())
    model = ShardedDataParallel(tensor_parallel(vit(), VIT_PLAN, mesh), mesh=mesh, units=1000)
    opt = sgd(model.parameters())
    data, d = mesh.size("data"), mesh.coordinate("data")
    per, loss_diff = total // data, 0.0
    for step in range(steps):
        x, y = batch(step, 0, total, total)
        ref_loss = reference_step(ref, ref_opt, x, y)
        opt.zero_grad()
        loss = F.cross_entropy(model(x[d * per:(d + 1) * per]), y[d * per:(d + 1) * per])
        loss.backward()
        opt.step()
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean, group=mesh.group("data"))
        loss_diff = max(loss_diff, relative(mean.item() / data, ref_loss.item()))
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, {"loss": loss_diff, "units": [u.name for u in model.units]})
    return {"case": "tensor 2 x sharded 2 vit (MLPs and heads)", "tolerance": SDP_TOL,
            "ranks": rows}
