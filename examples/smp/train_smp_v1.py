"""A model-parallel MNIST script written for the cloud vendor's model-parallel library v1
(`import smdistributed.modelparallel.torch as smp`: smp.init, @smp.step, DistributedModel,
DistributedOptimizer, model.backward, StepOutput.reduce_mean, smp.save partial checkpoints), as
its published PyTorch examples are written, with one change: the device patch (the CUDA lines,
marked `was:`), as on any CPU machine. On heft it runs as written:

    heft run -n 4 --distribution '{"smdistributed": {"modelparallel": {"enabled": true,
        "parameters": {"partitions": 2, "microbatches": 4, "pipeline": "interleaved",
        "ddp": true}}}}' -- .venv/bin/python examples/smp/train_smp_v1.py --data-path DIR

or as an estimator job with that distribution dict (docs/porting.md). DIR holds MNIST in
torchvision's layout (DIR/MNIST/raw/...)."""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torchvision import datasets, transforms

import smdistributed.modelparallel.torch as smp


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, 1)


# smp.step runs the function once per micro-batch, pipelined over the partitions.
@smp.step
def train_step(model, data, target):
    output = model(data)
    loss = F.nll_loss(output, target, reduction="mean")
    model.backward(loss)
    return output, loss


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        _, loss_mb = train_step(model, data, target)
        loss = loss_mb.reduce_mean()  # the average over the micro-batches
        optimizer.step()
        if smp.rank() == 0 and batch_idx % args.log_interval == 0:
            print("Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}".format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100.0 * batch_idx / len(train_loader), loss.item()), flush=True)


@smp.step
def test_step(model, data, target):
    output = model(data)
    loss = F.nll_loss(output, target, reduction="sum").item()
    pred = output.argmax(dim=1, keepdim=True)
    correct = pred.eq(target.view_as(pred)).sum().item()
    return loss, correct


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            loss_batch, correct_batch = test_step(model, data, target)
            test_loss += sum(loss_batch)
            correct += sum(correct_batch)
    test_loss /= len(test_loader.dataset)
    if smp.rank() == 0:
        print("\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n".format(
            test_loss, correct, len(test_loader.dataset),
            100.0 * correct / len(test_loader.dataset)), flush=True)


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--data-path", type=str, default="/tmp/data")
    parser.add_argument("--checkpoint-dir", type=str,
                        default=os.environ.get("SM_CHECKPOINT_DIR", "/opt/ml/checkpoints"))
    args = parser.parse_args()

    smp.init()
    torch.manual_seed(args.seed)
    device = torch.device("cpu")  # was: torch.device("cuda", smp.local_rank()); torch.cuda.set_device(smp.local_rank())
    kwargs = {"batch_size": args.batch_size}
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    if smp.local_rank() == 0:
        dataset1 = datasets.MNIST(args.data_path, train=True, download=True, transform=transform)
    smp.barrier()
    if smp.local_rank() != 0:
        dataset1 = datasets.MNIST(args.data_path, train=True, download=False, transform=transform)
    dataset2 = datasets.MNIST(args.data_path, train=False, transform=transform)
    # the ranks of one model replica read the same batches; the replicas read their shares
    train_sampler = torch.utils.data.distributed.DistributedSampler(
        dataset1, shuffle=True, seed=args.seed, rank=smp.dp_rank(), num_replicas=smp.dp_size(),
        drop_last=True)
    train_loader = torch.utils.data.DataLoader(dataset1, sampler=train_sampler, drop_last=True,
                                               **kwargs)
    test_loader = torch.utils.data.DataLoader(dataset2, batch_size=args.test_batch_size)

    model = Net()
    model = smp.DistributedModel(model)
    scaler = smp.amp.GradScaler()
    optimizer = smp.DistributedOptimizer(optim.Adadelta(model.parameters(), lr=args.lr))
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train_sampler.set_epoch(epoch)
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()

    if smp.dp_rank() == 0:
        model_dict = model.local_state_dict()
        opt_dict = optimizer.local_state_dict()
        smp.save({"model_state_dict": model_dict, "optimizer_state_dict": opt_dict,
                  "scaler": scaler.state_dict()},
                 os.path.join(args.checkpoint_dir, "pt_mnist_checkpoint.pt"), partial=True)
    smp.barrier()
    if smp.rank() == 0:
        print("Training done; checkpoint in", args.checkpoint_dir, flush=True)


if __name__ == "__main__":
    main()
