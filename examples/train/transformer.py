"""A small transformer language model (2 layers, width 64, about 77 K parameters) trained with
DDP on synthetic token sequences (each token predicts the next of a noisy counting pattern).

    topolab train scenarios/topoopt-12.toml --backend topolab,gloo -- .venv/bin/python examples/train/transformer.py
"""

import torch
import torch.nn as nn
from common import train

VOCAB, LENGTH, WIDTH = 64, 32, 64


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Parameter(torch.randn(LENGTH, WIDTH) * 0.02)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, dim_feedforward=2 * WIDTH, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(LENGTH), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position
        return self.head(self.encoder(x, mask=self.mask, is_causal=True))


def batch(rank: int, step: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    start = torch.randint(0, VOCAB, (size, 1), generator=g)
    stride = torch.randint(1, 4, (size, 1), generator=g)
    seq = (start + stride * torch.arange(LENGTH + 1)) % VOCAB
    return seq[:, :-1], seq[:, 1:]


def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


if __name__ == "__main__":
    train(TinyLM, batch, loss)
