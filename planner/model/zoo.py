"""The model zoo: the six models of TopoOpt's evaluation as per-layer parameters and FLOPs.

Each model is a chain of layers (plus, for DLRM and NCF, embedding tables that feed the
interaction layer). A layer carries what the planner needs to derive traffic and compute
time: parameter count (float32 gradients, 4 bytes each), forward FLOPs per sample, and the
bytes of its output activation per sample (what crosses servers when the next layer lives
elsewhere). Backward costs twice the forward FLOPs (the usual 1:2 rule), except where a
layer says otherwise (a first layer, whose input needs no gradient).

Sources (sizes as the paper's scripts and the models' own papers give them, rounded; each
checked against its twin in plain torch.nn under examples/models/, traced and counted by
torch, benchmarks/model_import.py: within 2% in parameters and FLOPs):
- DLRM: Naumov et al. 2019 and TopoOpt section 6 (embedding-heavy recommendation model,
  tables model-parallel). Bottom MLP 13-512-256-128, top MLP 1024-1024-512-256-1, embedding
  dimension 128; TopoOpt's DLRM has large tables: here 16 tables of 4M rows (2 GiB each).
- CANDLE Uno: the ECP-CANDLE Pilot1 Uno model: three feature towers of 1000-wide dense layers
  feeding a 1000-wide 5-layer head; dense-heavy, about 0.2 G parameters.
- BERT: BERT-large (Devlin et al. 2019): 24 layers, hidden 1024, 16 heads, seq 128,
  about 340 M parameters.
- NCF: He et al. 2017 (NeuMF) with large user/item tables (TopoOpt uses a large NCF):
  two tables of 8M rows x 64 (GMF + MLP), MLP 256-128-64.
- ResNet-50: He et al. 2016, 25,557,032 parameters, 4.09 G multiply-adds (8.18 GFLOPs) per
  224x224 image.
- VGG16: Simonyan and Zisserman 2015, 138 M parameters, 15.5 GFLOPs per image.

Compute time uses a stated device throughput (`DEFAULT_DEVICE_TFLOPS`: one A100 at a
realistic 40% of its 312 TFLOPS fp16 peak, the 12-node prototype's server).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

FLOAT_BYTES = 4
DEFAULT_DEVICE_TFLOPS = 125.0

MODELS = ("dlrm", "candle", "bert", "ncf", "resnet50", "vgg16")


@dataclass(frozen=True)
class Layer:
    """One operator: ``params`` weights, ``flops`` forward FLOPs per sample,
    ``out_bytes`` activation bytes per sample it hands to the next layer; ``bwd_flops``
    its backward FLOPs where the 1:2 rule is wrong (None: twice the forward)."""

    name: str
    kind: str  # dense | conv | attention | embedding | interaction | head
    params: int
    flops: float
    out_bytes: int
    bwd_flops: float | None = None

    @property
    def param_bytes(self) -> int:
        return self.params * FLOAT_BYTES


@dataclass(frozen=True)
class Model:
    name: str
    layers: tuple[Layer, ...]
    source: str

    @property
    def params(self) -> int:
        return sum(l.params for l in self.layers)

    @property
    def param_bytes(self) -> int:
        return self.params * FLOAT_BYTES

    @property
    def embeddings(self) -> tuple[Layer, ...]:
        return tuple(l for l in self.layers if l.kind == "embedding")

    @property
    def dense_layers(self) -> tuple[Layer, ...]:
        return tuple(l for l in self.layers if l.kind != "embedding")


def _mlp(prefix: str, widths: list[int], kind: str = "dense") -> list[Layer]:
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(Layer(f"{prefix}{i}", kind, a * b + b, 2.0 * a * b, b * FLOAT_BYTES))
    return layers


def _embedding(name: str, rows: int, dim: int, lookups: int = 1) -> Layer:
    # An embedding lookup costs almost no FLOPs; its output is `lookups` vectors of `dim`.
    return Layer(name, "embedding", rows * dim, 2.0 * dim * lookups, dim * lookups * FLOAT_BYTES)


def _dlrm() -> Model:
    tables = [_embedding(f"emb{i}", 4_000_000, 128) for i in range(16)]
    bottom = _mlp("bot", [13, 512, 256, 128])
    n_feat = 16 + 1
    inter = Layer(
        "interaction", "interaction", 0, 2.0 * n_feat * n_feat * 128, (128 + n_feat * (n_feat - 1) // 2) * FLOAT_BYTES
    )
    top = _mlp("top", [128 + n_feat * (n_feat - 1) // 2, 1024, 1024, 512, 256, 1])
    return Model("dlrm", tuple(tables + bottom + [inter] + top), "Naumov et al. 2019; TopoOpt section 6")


def _candle() -> Model:
    towers = []
    for t, width_in in (("gene", 942), ("drug1", 3820), ("drug2", 3820)):
        towers += _mlp(f"{t}_", [width_in, 1000, 1000, 1000])
    head = _mlp("head", [3000, 1000, 1000, 1000, 1000, 1000, 1])
    # Uno's towers are large but its head dominates depth; total about 0.02 G: TopoOpt scales
    # the layers up (4096-wide) to stress the network, as here.
    scaled = [Layer(l.name, l.kind, l.params * 16, l.flops * 16, l.out_bytes * 4) for l in towers + head]
    # A tower's first layer reads the model's input, which needs no gradient: its backward
    # is the weight gradient alone, 1x its forward (torch's count on the twin; the 1:2 rule
    # put CANDLE's training FLOPs 15% too high, these layers being its largest)
    firsts = {f"{t}_0" for t in ("gene", "drug1", "drug2")}
    scaled = [replace(l, bwd_flops=l.flops) if l.name in firsts else l for l in scaled]
    return Model("candle", tuple(scaled), "ECP-CANDLE Pilot1 Uno, widened 4x as in TopoOpt's runs")


def _bert() -> Model:
    hidden, seq, vocab, n_layers = 1024, 128, 30522, 24
    layers = [Layer("embed", "dense", vocab * hidden + 512 * hidden, 2.0 * seq * hidden, seq * hidden * FLOAT_BYTES)]
    for i in range(n_layers):
        attn_params = 4 * hidden * hidden + 4 * hidden
        ffn_params = 2 * hidden * 4 * hidden + 5 * hidden
        flops = 2.0 * seq * (attn_params + ffn_params) + 2.0 * 2 * seq * seq * hidden
        layers.append(Layer(f"enc{i}", "attention", attn_params + ffn_params, flops, seq * hidden * FLOAT_BYTES))
    layers.append(Layer("pooler", "head", hidden * hidden + hidden, 2.0 * hidden * hidden, hidden * FLOAT_BYTES))
    return Model("bert", tuple(layers), "BERT-large, Devlin et al. 2019")


def _ncf() -> Model:
    tables = [_embedding(n, 8_000_000, 64) for n in ("user_gmf", "item_gmf", "user_mlp", "item_mlp")]
    mlp = _mlp("mlp", [128, 256, 128, 64])
    head = [Layer("predict", "head", 128 + 1, 256.0, FLOAT_BYTES)]
    return Model("ncf", tuple(tables + mlp + head), "NeuMF, He et al. 2017, large tables as in TopoOpt")


def _conv_stack(name: str, spec: list[tuple[str, int, float, int]], source: str) -> Model:
    return Model(
        name, tuple(Layer(n, "conv" if not n.startswith("fc") else "dense", p, f, o) for n, p, f, o in spec), source
    )


def _resnet50() -> Model:
    # (stage, parameters, forward MACs per image, output activation bytes per image); the
    # parameters and MACs of each stage as torch counts them on examples/models/resnet50.py
    # (benchmarks/model_import.py; conv1 includes its batch norm)
    spec = [
        ("conv1", 9_536, 0.118e9, 64 * 56 * 56 * 4),
        ("layer1", 215_808, 0.668e9, 256 * 56 * 56 * 4),
        ("layer2", 1_219_584, 1.028e9, 512 * 28 * 28 * 4),
        ("layer3", 7_098_368, 1.464e9, 1024 * 14 * 14 * 4),
        ("layer4", 14_964_736, 0.809e9, 2048 * 7 * 7 * 4),
        ("fc", 2_049_000, 0.002e9, 1000 * 4),
    ]
    return _conv_stack("resnet50", [(n, p, 2 * f, o) for n, p, f, o in spec], "He et al. 2016 (MACs x 2 = FLOPs)")


def _vgg16() -> Model:
    spec = [
        ("block1", 38_720, 1.94e9, 64 * 112 * 112 * 4),
        ("block2", 221_440, 2.77e9, 128 * 56 * 56 * 4),
        ("block3", 1_475_328, 4.62e9, 256 * 28 * 28 * 4),
        ("block4", 5_899_776, 4.62e9, 512 * 14 * 14 * 4),
        ("block5", 7_079_424, 1.39e9, 512 * 7 * 7 * 4),
        ("fc6", 102_764_544, 0.10e9, 4096 * 4),
        ("fc7", 16_781_312, 0.017e9, 4096 * 4),
        ("fc8", 4_097_000, 0.004e9, 1000 * 4),
    ]
    return _conv_stack(
        "vgg16", [(n, p, 2 * f, o) for n, p, f, o in spec], "Simonyan and Zisserman 2015 (MACs x 2 = FLOPs)"
    )


_BUILDERS = {"dlrm": _dlrm, "candle": _candle, "bert": _bert, "ncf": _ncf, "resnet50": _resnet50, "vgg16": _vgg16}


def get_model(name: str) -> Model:
    """The zoo's model called ``name`` (one of `MODELS`)."""
    try:
        return _BUILDERS[name]()
    except KeyError:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}") from None
