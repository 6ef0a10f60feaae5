"""BERT-large (Devlin et al. 2019) in plain ``torch.nn``: the encoder of bert-large-uncased,
as Hugging Face's ``BertModel`` (embeddings, 24 layers, pooler): 335,141,888 parameters.

``build()`` returns the model and one server's micro-batch of token ids (sequence length
128) for ``topolab import`` / ``[workload] model = "../examples/models/bert_large.py:build"``.
Built on the ``meta`` device: tracing needs shapes, not weights.
"""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB, HIDDEN, LAYERS, HEADS, FFN, MAX_POSITIONS, TYPES = 30522, 1024, 24, 16, 4096, 512, 2
BATCH, SEQ = 8, 128


class Embeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(MAX_POSITIONS, HIDDEN)
        self.token_type = nn.Embedding(TYPES, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        types = torch.zeros_like(ids)
        return self.dropout(self.norm(self.word(ids) + self.position(positions) + self.token_type(types)))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.attn_out = nn.Linear(HIDDEN, HIDDEN)
        self.attn_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, FFN)
        self.output = nn.Linear(FFN, HIDDEN)
        self.out_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, HEADS, HIDDEN // HEADS).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(HIDDEN // HEADS), dim=-1)
        context = (self.dropout(scores) @ v).transpose(1, 2).reshape(x.shape)
        x = self.attn_norm(x + self.dropout(self.attn_out(context)))
        return self.out_norm(x + self.dropout(self.output(nn.functional.gelu(self.intermediate(x)))))


class BertLarge(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embeddings = Embeddings()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.pooler = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        return torch.tanh(self.pooler(x[:, 0]))


def build(batch: int = BATCH, seq: int = SEQ) -> tuple[nn.Module, tuple[torch.Tensor]]:
    with torch.device("meta"):
        return BertLarge(), (torch.zeros(batch, seq, dtype=torch.long),)
