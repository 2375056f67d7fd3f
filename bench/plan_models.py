"""Models for `heft plan --model bench/plan_models.py:NAME` (bench/auto_layout_before_after.sh):
each returns (layers, example_batch). resnet18 is torchvision's (nobody here wrote it), cut into
its children with a flatten before the classifier; mlp a plain stack of Linear and GELU."""
import torch
from torch import nn


def resnet18():
    from torchvision.models import resnet18 as build
    torch.manual_seed(0)
    m = build(num_classes=10)
    layers = [m.conv1, m.bn1, m.relu, m.maxpool, m.layer1, m.layer2, m.layer3, m.layer4, m.avgpool,
              nn.Flatten(1), m.fc]
    return layers, torch.randn(8, 3, 64, 64)


def mlp():
    torch.manual_seed(0)
    layers = []
    for _ in range(6):
        layers += [nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)]
    return layers, torch.randn(32, 512)
