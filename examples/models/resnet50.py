"""ResNet-50 (He et al. 2016) in plain ``torch.nn``: torchvision's layout, 25,557,032 parameters.

``build()`` returns the model and one server's micro-batch of 224 x 224 images for
``topolab import`` / ``[workload] model = "../examples/models/resnet50.py:build"``. The model is
built on the ``meta`` device: tracing needs shapes, not weights.
"""

from __future__ import annotations

import torch
from torch import nn

BATCH = 32


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(64, 3)
        self.layer2 = self._stage(128, 4, stride=2)
        self.layer3 = self._stage(256, 6, stride=2)
        self.layer4 = self._stage(512, 3, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def _stage(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        out = planes * Bottleneck.expansion
        downsample = None
        if stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = out
        layers += [Bottleneck(out, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(batch: int = BATCH) -> tuple[nn.Module, tuple[torch.Tensor]]:
    with torch.device("meta"):
        return ResNet50(), (torch.randn(batch, 3, 224, 224),)
