"""A small CNN trained with DDP on synthetic 16 x 16 images: a convolutional trunk of about
240 K parameters and a fully connected head of about 1.07 M (1.31 M in all), so that a step's gradients
(5.2 MB) take longer to AllReduce at the emulated rate than the twelve ranks take to compute
them on two cores, as in the communication-heavy jobs TopoOpt is for.

topolab train scenarios/topoopt-12.toml --backend topolab,gloo -- .venv/bin/python examples/train/cnn.py
"""

import torch
import torch.nn as nn
from common import train


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(128, 128, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(128 * 2 * 2, 2048),
        nn.ReLU(),
        nn.Linear(2048, 10),
    )


def batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    images = torch.randn(size, 3, 16, 16, generator=g)
    labels = (images[:, 0].mean(dim=(1, 2)) > 0).long() + 2 * (images[:, 1].mean(dim=(1, 2)) > 0).long()
    return images, labels


if __name__ == "__main__":
    train(model, batch, nn.functional.cross_entropy)
