"""The other models of the planner's zoo (planner/model/zoo.py) written in plain ``torch.nn``, as
the zoo describes them, so the zoo's hand-written figures can be checked against torch's
own counts (benchmarks/model_import.py). ResNet-50 and BERT-large have files of their own.

Built on the ``meta`` device: DLRM's and NCF's tables (8 G and 2 G parameters) need no
memory. ``[workload] model = "../examples/models/zoo_twins.py:dlrm"`` (from a scenario in ``scenarios/``) plans any of them.
"""

from __future__ import annotations

import torch
from torch import nn

BATCH = 32


def _mlp(widths: list[int], last_relu: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class VGG16(nn.Module):
    """Simonyan and Zisserman 2015, configuration D: 138,357,544 parameters."""

    CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, int(v), 3, padding=1), nn.ReLU()]
                channels = int(v)
        self.features = nn.Sequential(*layers)
        self.classifier = _mlp([512 * 7 * 7, 4096, 4096, 1000])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


class NCF(nn.Module):
    """NeuMF (He et al. 2017) with TopoOpt's large tables: 4 tables of 8M x 64, MLP 128-256-128-64."""

    def __init__(self, rows: int = 8_000_000, dim: int = 64) -> None:
        super().__init__()
        self.user_gmf, self.item_gmf, self.user_mlp, self.item_mlp = (nn.Embedding(rows, dim) for _ in range(4))
        self.mlp = _mlp([2 * dim, 256, 128, 64], last_relu=True)
        self.predict = nn.Linear(dim + 64, 1)

    def forward(self, users: torch.Tensor, items: torch.Tensor) -> torch.Tensor:
        gmf = self.user_gmf(users) * self.item_gmf(items)
        mlp = self.mlp(torch.cat([self.user_mlp(users), self.item_mlp(items)], dim=1))
        return self.predict(torch.cat([gmf, mlp], dim=1))


class DLRM(nn.Module):
    """Naumov et al. 2019 as TopoOpt runs it: 16 tables of 4M x 128, bottom MLP 13-512-256-128,
    pairwise dot-product interaction of the 17 features, top MLP 264-1024-1024-512-256-1."""

    def __init__(self, tables: int = 16, rows: int = 4_000_000, dim: int = 128) -> None:
        super().__init__()
        self.tables = nn.ModuleList(nn.Embedding(rows, dim) for _ in range(tables))
        self.bottom = _mlp([13, 512, 256, dim], last_relu=True)
        n = tables + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, offset=1), persistent=False)
        self.top = _mlp([dim + n * (n - 1) // 2, 1024, 1024, 512, 256, 1])

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        features = torch.stack([x] + [t(sparse[:, i]) for i, t in enumerate(self.tables)], dim=1)
        dots = torch.bmm(features, features.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1))


class CANDLE(nn.Module):
    """ECP-CANDLE Pilot1 Uno widened 4x as in TopoOpt's runs: three feature towers of three
    4000-wide layers feeding a head of five 4000-wide layers."""

    def __init__(self, widen: int = 4) -> None:
        super().__init__()
        w = 1000 * widen
        self.inputs = (942 * widen, 3820 * widen, 3820 * widen)
        self.towers = nn.ModuleList(_mlp([n, w, w, w], last_relu=True) for n in self.inputs)
        self.head = _mlp([3 * w, w, w, w, w, w, widen])

    def forward(self, gene: torch.Tensor, drug1: torch.Tensor, drug2: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([t(x) for t, x in zip(self.towers, (gene, drug1, drug2))], dim=1))


def vgg16(batch: int = BATCH) -> tuple[nn.Module, tuple[torch.Tensor]]:
    with torch.device("meta"):
        return VGG16(), (torch.randn(batch, 3, 224, 224),)


def ncf(batch: int = BATCH) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    with torch.device("meta"):
        ids = torch.zeros(batch, dtype=torch.long)
        return NCF(), (ids, ids)


def dlrm(batch: int = BATCH) -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    with torch.device("meta"):
        return DLRM(), (torch.randn(batch, 13), torch.zeros(batch, 16, dtype=torch.long))


def candle(batch: int = BATCH) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    with torch.device("meta"):
        model = CANDLE()
        return model, tuple(torch.randn(batch, n) for n in model.inputs)
