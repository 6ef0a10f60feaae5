"""BERT-large from Hugging Face ``transformers``, built from bert-large-uncased's configuration
(written out here: no download, no weights): ``BertModel``, 335,141,888 parameters.

Any ``transformers`` model imports the same way: build it from its config object on the
``meta`` device and return it with example inputs. ``[workload] model =
"../examples/models/hf_bert.py:build"`` (from a scenario in ``scenarios/``).
"""

from __future__ import annotations

import torch
from transformers import BertConfig, BertModel

BATCH, SEQ = 8, 128
BERT_LARGE_UNCASED = BertConfig(
    vocab_size=30522,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=2,
    layer_norm_eps=1e-12,
)


def build(batch: int = BATCH, seq: int = SEQ) -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    with torch.device("meta"):
        return BertModel(BERT_LARGE_UNCASED), (torch.zeros(batch, seq, dtype=torch.long),)
