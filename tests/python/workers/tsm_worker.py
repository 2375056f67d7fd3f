"""One rank of tests/python/tsm_test.py, started by `heft run -n 4` with SM_HP_MP_PARAMETERS
set (the first case reads it). Runs the cases below in order, each after its own tsm.init, and
rank 0 prints one `CASE {json}` line per case; the test checks the numbers. Any rank failing an
internal check raises (non-zero exit).

The model: torchvision's VisionTransformer shaped like vit_b_16 but tiny (image 32, patch 8,
2 layers, 4 heads, width 32, MLP 64, 10 classes), split by tsm.transform and sharded by FSDP2
(fully_shard on each encoder layer and the root over tsm.state.dp_mesh), trained STEPS SGD
steps with momentum on a global batch of GLOBAL images, each data rank its share; beside it
each rank trains the unsplit model in one process on the whole batch (the reference)."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torchvision.models.vision_transformer import VisionTransformer

import heft.torch.sagemaker as tsm
from heft.torch import _c10d
from heft.torch.parallel import deferred_init
from heft.torch.parallel.tensor import full_state_dict

VIT = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64,
           num_classes=10)
SEED, STEPS, GLOBAL = 7, 3, 8
_T = _c10d.parallel.tensor


def emit(case, **row):
    if dist.get_rank() == 0:
        print("CASE " + json.dumps(dict(row, case=case)), flush=True)


def batch(step):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(GLOBAL, 3, 32, 32, generator=g), torch.randint(0, 10, (GLOBAL,), generator=g)


def reference(seed):
    torch.manual_seed(seed)
    return VisionTransformer(**VIT)


def ranks(group):
    return dist.get_process_group_ranks(group)


def layout():
    s = tsm.state
    return {"rank": s.rank, "world": s.world_size, "local_rank": s.local_rank,
            "tp": [s.tp_rank, s.tp_size, s.tensor_parallel_degree], "dp": [s.dp_rank, s.dp_size],
            "hybrid": s.hybrid_shard_degree, "tp_ranks": ranks(s.tp_process_group),
            "dp_ranks": ranks(s.dp_process_group), "rep_ranks": ranks(s.rep_rank_process_group),
            "dp_mesh": [list(s.dp_mesh.mesh.shape), list(s.dp_mesh.mesh_dim_names),
                        s.dp_mesh.mesh.reshape(-1).tolist()]}


def gather(row):
    rows = [None] * dist.get_world_size()
    dist.all_gather_object(rows, row)
    return rows


def train(model, ref):
    """STEPS steps of the FSDP2-wrapped `model` (after tsm.transform) and of the one-process
    `ref`; the data-averaged losses, the reference's, the C++ tensor layers' counts per step,
    the local shape of the first MLP weight and the bytes autograd saved for backward per
    step (saved_tensors_hooks)."""
    for layer in model.encoder.layers:
        fully_shard(layer, mesh=tsm.state.dp_mesh)
    fully_shard(model, mesh=tsm.state.dp_mesh)
    held = list(model.encoder.layers[0].mlp[0].weight.to_local().shape)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    dp, d = tsm.state.dp_size, tsm.state.dp_rank
    losses, ref_losses, counts, saved = [], [], [], []  # saved: bytes autograd kept
    for step in range(STEPS):
        x, y = batch(step)
        ref_opt.zero_grad()
        ref_loss = F.cross_entropy(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        _T.reset_counters()
        opt.zero_grad()
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.nbytes) or t,
                                                      lambda t: t):
            loss = F.cross_entropy(model(x.chunk(dp)[d]), y.chunk(dp)[d])
        loss.backward()
        opt.step()
        c = _T.counters()
        counts.append([c["forward_allreduces"], c["backward_allreduces"]])
        mean = loss.detach().reshape(1).clone()
        dist.all_reduce(mean, group=tsm.state.dp_process_group)
        losses.append(mean.item() / dp)
        ref_losses.append(ref_loss.item())
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
    return {"losses": losses, "reference": ref_losses, "worst": worst, "counts": counts,
            "held": held, "saved_bytes": sum(saved) // STEPS}


def same_state(a, b):
    return sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in b)


def case_env():
    """SM_HP_MP_PARAMETERS: tensor 2 x data 2 (shard 2), random_seed; no process group yet."""
    before = dist.is_initialized()
    tsm.init()
    model = VisionTransformer(**VIT)
    ref = reference(SEED)
    seeded = same_state(model.state_dict(), ref.state_dict())
    model = tsm.transform(model)
    attention = model.encoder.layers[0].self_attention
    split = {"heads": attention.num_heads, "in_proj": list(attention.in_proj_weight.shape),
             "type": type(attention).__name__}
    row = train(model, ref)
    emit("env", before=before, backend=str(dist.get_backend()), seeded=seeded, split=split,
         layouts=gather(layout()), **row)


def case_file(directory):
    """A JSON file: tensor 1, hybrid_shard_degree 2 of data 4 (2 replicas x 2 shards)."""
    path = os.path.join(directory, f"tsm-{dist.get_rank()}.json")
    with open(path, "w") as f:
        json.dump({"tensor_parallel_degree": 1, "hybrid_shard_degree": 2, "random_seed": SEED}, f)
    tsm.init(path)
    model = VisionTransformer(**VIT)
    ref = reference(SEED)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    types = [type(m) for m in model.modules()]
    same = tsm.transform(model)
    unchanged = same is model and [type(m) for m in model.modules()] == types and same_state(
        model.state_dict(), before)
    row = train(model, ref)
    emit("file", unchanged=unchanged, layouts=gather(layout()), **row)


def case_checkpointing():
    """A dict: tensor 2, hybrid_shard_degree 1 (replicas only), activation_checkpointing."""
    tsm.init({"tensor_parallel_degree": 2, "hybrid_shard_degree": 1, "random_seed": SEED,
              "activation_checkpointing": True})
    model = tsm.transform(VisionTransformer(**VIT))
    wrapped = [n for n, m in model.named_modules() if "forward" in m.__dict__]
    row = train(model, reference(SEED))
    emit("checkpointing", wrapped=wrapped, layouts=gather(layout()), **row)


def case_delayed():
    """delayed_parameter_initialization: tensor 2 x data 2, the ViT built under heft's
    deferred_init: transform replays it, each rank keeping its slices and the other layers
    whole; the values are one process's (full_state_dict) and no meta tensor is left."""
    tsm.init({"tensor_parallel_degree": 2, "random_seed": SEED,
              "delayed_parameter_initialization": True})
    with deferred_init():
        model = VisionTransformer(**VIT)
    whole = sum(p.numel() * p.element_size() for p in reference(SEED).parameters())
    model = tsm.transform(model)  # the replay draws what the seeded constructor drew
    metas = sum(1 for p in model.parameters() if p.is_meta)
    held = sum(p.numel() * p.element_size() for p in model.parameters())
    exact = same_state(full_state_dict(model), reference(SEED).state_dict())
    undeclared = refused(lambda: tsm.transform(_deferred_vit(False)))
    row = train(model, reference(SEED))
    emit("delayed", metas=metas, held_bytes=held, whole_bytes=whole, exact=exact,
         peak=model.deferred_peak_bytes, undeclared=undeclared, **row)


def _deferred_vit(declared):
    tsm.init({"tensor_parallel_degree": 2, "random_seed": SEED,
              "delayed_parameter_initialization": declared})
    with deferred_init():
        return VisionTransformer(**VIT)


def refused(call):
    try:
        call()
    except ValueError as e:
        return str(e)
    return None


def case_errors():
    """Degrees that do not fit the world, different weights on different ranks, and rank 0's
    weights by broadcast."""
    row = {"tp3": refused(lambda: tsm.init({"tensor_parallel_degree": 3})),
           "hybrid3": refused(lambda: tsm.init({"tensor_parallel_degree": 2,
                                                "hybrid_shard_degree": 3}))}
    tsm.init({"tensor_parallel_degree": 2})
    torch.manual_seed(100 + dist.get_rank())
    row["different"] = refused(lambda: tsm.transform(VisionTransformer(**VIT)))
    torch.manual_seed(100 + dist.get_rank())
    model = tsm.transform(VisionTransformer(**VIT), load_state_dict_from_rank0=True)
    row["rank0"] = same_state(full_state_dict(model), reference(100).state_dict())
    row["gpu"] = refused(lambda: tsm.transform(VisionTransformer(**VIT), device="cuda"))
    emit("errors", everyone=gather(row), **row)


def main():
    directory = sys.argv[1]
    torch.set_num_threads(1)
    case_env()
    case_file(directory)
    case_checkpointing()
    case_delayed()
    case_errors()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
