"""One rank of tests/python/smp_test.py, started by `heft run -n 4 --distribution` with the
model-parallel library's dict (partitions 2, microbatches 4, interleaved, ddp): the script
imports the library's own module path. Prints one `CASE {json}` line per case on rank 0.

The model is a plain nn.Module with a functional forward (traced by torch.fx into layers), no
dropout, so that every case can be compared with one process training the same model on the
same global batch of 16 (each of the 2 replicas passes its 8)."""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import smdistributed.modelparallel.torch as smp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torchvision_cases as tc  # noqa: E402  (tests/python: models nobody here wrote)

STEPS, GLOBAL_BATCH, LR = 3, 16, 0.05
folder = sys.argv[1]
scaler = smp.amp.GradScaler()  # the library's amp scaler: scale 1 on CPUs (fp32, bf16)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = torch.tanh(self.fc2(x))
        return F.log_softmax(self.fc3(x), dim=1)


def batches():
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(GLOBAL_BATCH, 1, 12, 12, generator=g),
             torch.randint(0, 10, (GLOBAL_BATCH,), generator=g)) for _ in range(STEPS + 1)]


def fresh(seed=0):
    torch.manual_seed(seed)
    return Net()


def one_process():
    """Losses of one process on the whole batch, and its eval (sum loss, correct) after."""
    model = fresh()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    losses = []
    data = batches()
    for x, y in data[:STEPS]:
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        out = model(data[STEPS][0])
        evaluation = (F.nll_loss(out, data[STEPS][1], reduction="sum").item(),
                      int(out.argmax(1).eq(data[STEPS][1]).sum()))
    return losses, evaluation


@smp.step
def train_step(model, data, target):
    output = model(data)
    loss = F.nll_loss(output, target, reduction="mean")
    model.backward(scaler.scale(loss))
    return output, loss


@smp.step
def test_step(model, data, target):
    output = model(data)
    loss = F.nll_loss(output, target, reduction="sum").item()
    correct = output.argmax(dim=1, keepdim=True).eq(target.view(-1, 1)).sum().item()
    return loss, correct


def my_share(t):
    n = t.shape[0] // smp.dp_size()
    return t[smp.dp_rank() * n:(smp.dp_rank() + 1) * n]


def train(model, optimizer, data):
    losses = []
    model.train()
    for x, y in data:
        optimizer.zero_grad()
        _, loss_mb = train_step(model, my_share(x), my_share(y))
        loss = loss_mb.reduce_mean().reshape(1).double()
        dist.all_reduce(loss, group=smp.get_dp_process_group())
        losses.append(loss.item() / smp.dp_size())
        scaler.step(optimizer)
        scaler.update()
    return losses


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        loss_batch, correct_batch = test_step(model, my_share(x), my_share(y))
    t = torch.tensor([sum(loss_batch), sum(correct_batch)], dtype=torch.float64)
    dist.all_reduce(t, group=smp.get_dp_process_group())
    return t[0].item(), int(t[1].item())


def worst(a, b):
    return max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))


def report(case, **row):
    if smp.rank() == 0:
        print("CASE " + json.dumps(dict(case=case, **row)), flush=True)


def run_case(case, reference):
    model = smp.DistributedModel(fresh())
    optimizer = smp.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    data = batches()
    losses = train(model, optimizer, data[:STEPS])
    evaluation = evaluate(model, *data[STEPS])
    ref_losses, ref_eval = reference
    report(case, losses=losses, reference=ref_losses, worst=worst(losses, ref_losses),
           eval=evaluation, reference_eval=ref_eval,
           eval_worst=worst([evaluation[0]], [ref_eval[0]]),
           pp=smp.pp_size(), dp=smp.dp_size(), mp_group=smp.get_mp_group(),
           dp_group=smp.get_dp_group(),
           plan=model._pipe.plan_text if model.pipelined else None)
    return model, optimizer


@smp.step
def vision_step(model, data, target):
    loss = F.cross_entropy(model(data), target)
    model.backward(loss)
    return loss


def torchvision_case(case, make, steps=2):
    """A torchvision model (traced by heft: ViT's class token and residual blocks, ResNet's
    blocks) under the library's pipeline against one process on the same global batch."""
    ref = make()
    ref_opt = tc.sgd(ref.parameters())
    reference = [tc.reference_step(ref, ref_opt, *tc.batch(k, 0, GLOBAL_BATCH, GLOBAL_BATCH))
                 for k in range(steps)]
    model = smp.DistributedModel(make())
    optimizer = smp.DistributedOptimizer(tc.sgd(model.parameters()))
    model.train()
    losses = []
    for k in range(steps):
        x, y = tc.batch(k, 0, GLOBAL_BATCH, GLOBAL_BATCH)
        optimizer.zero_grad()
        loss = vision_step(model, my_share(x), my_share(y)).reduce_mean().reshape(1).double()
        dist.all_reduce(loss, group=smp.get_dp_process_group())
        losses.append(loss.item() / smp.dp_size())
        optimizer.step()
    reference = [float(r) for r in reference]
    report(case, losses=losses, reference=reference, worst=worst(losses, reference),
           layers=len(model.layers), plan=model._pipe.plan_text)


def checkpoint_round_trip():
    """Trained 2 steps, saved partially (dp_rank 0), loaded into a model built from another
    seed before its first step; both then train the same 2 steps: equal losses, equal whole
    state_dict."""
    data = batches()
    model = smp.DistributedModel(fresh())
    optimizer = smp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    train(model, optimizer, data[:2])
    path = os.path.join(folder, "smp_checkpoint.pt")
    if smp.dp_rank() == 0:
        smp.save({"model_state_dict": model.local_state_dict(),
                  "optimizer_state_dict": optimizer.local_state_dict()}, path, partial=True)
    smp.barrier()
    files = sorted(f for f in os.listdir(folder) if f.startswith("smp_checkpoint.pt_"))
    after = train(model, optimizer, data[2:4])
    full = model.state_dict()

    loaded = smp.DistributedModel(fresh(seed=99))
    loaded_opt = smp.DistributedOptimizer(
        torch.optim.SGD(loaded.parameters(), lr=LR, momentum=0.9))
    checkpoint = smp.load(path, partial=True)
    loaded.load_state_dict(checkpoint["model_state_dict"])
    loaded_opt.load_state_dict(checkpoint["optimizer_state_dict"])
    resumed = train(loaded, loaded_opt, data[2:4])
    loaded_full = loaded.state_dict()
    same = sorted(full) == sorted(loaded_full) and all(
        torch.equal(full[k], loaded_full[k]) for k in full)
    report("checkpoint", files=files, after=after, resumed=resumed, same_state=same,
           keys=len(full), local_keys=len(model.local_state_dict()))


def main():
    reference = one_process()
    smp.init()  # SM_HP_MP_PARAMETERS from the job's distribution
    report("ranks", rank=smp.rank(), size=smp.size(), pp=smp.pp_size(), dp=smp.dp_size(),
           local_size=smp.local_size())
    run_case("interleaved", reference)
    checkpoint_round_trip()
    smp.init({"partitions": 2, "microbatches": 4, "pipeline": "simple", "ddp": True})
    run_case("simple", reference)
    torchvision_case("vit", tc.vit)
    torchvision_case("resnet_group", lambda: tc.resnet("group"))
    smp.init({"partitions": 2, "microbatches": 4, "pipeline": "interleaved",
              "virtual_stages": 2, "ddp": True})
    run_case("virtual", reference)
    smp.init({"partitions": 1, "microbatches": 4, "ddp": True})
    run_case("data_only", reference)
    # smp.partition blocks with auto_partition false: conv1, conv2 on 0, the rest on 1.
    smp.init({"partitions": 2, "microbatches": 2, "pipeline": "interleaved",
              "auto_partition": False, "default_partition": 1, "ddp": True})
    torch.manual_seed(0)
    net = Net.__new__(Net)
    nn.Module.__init__(net)
    with smp.partition(0):
        net.conv1 = nn.Conv2d(1, 4, 3)
        net.conv2 = nn.Conv2d(4, 8, 3)
    net.fc1, net.fc2, net.fc3 = nn.Linear(128, 32), nn.Linear(32, 16), nn.Linear(16, 10)
    model = smp.DistributedModel(net)
    optimizer = smp.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    losses = train(model, optimizer, batches()[:STEPS])
    report("manual", losses=losses, reference=reference[0], worst=worst(losses, reference[0]),
           local=sorted(model.local_state_dict()), pp_rank=smp.pp_rank())
    parts = smp.allgather(sorted(model.local_state_dict()), smp.MP_GROUP)
    report("manual_parts", parts=parts)
    dist.barrier()


main()
