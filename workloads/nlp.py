"""NLP: a small BERT-style encoder built in code with seeded random weights (nothing downloaded).

Inputs: `input_ids` int64 [batch, seq] and `attention_mask` int64 [batch, seq] (1 = token,
0 = padding). Outputs: the last hidden state [batch, seq, hidden] and the pooled [CLS]
vector [batch, hidden], in that order. Agreement: cosine similarity of each sample's last hidden
state with `base`'s over the tokens its attention mask keeps (the score is the lowest over the
samples), plus the max absolute difference. Example inputs look like tokenized text.
"""

from __future__ import annotations

import numpy as np

from workloads.agreement import Agreement, max_abs_diff
from workloads.binding import ATTENTION_MASK, TOKEN_IDS

INPUT_NAMES = ["input_ids", "attention_mask"]
INPUT_ROLES = {
    "input_ids": TOKEN_IDS,
    "attention_mask": ATTENTION_MASK,
}  # what each input is, to bind it to a model's inputs (workloads/binding.py)
DEFAULT_INPUT_SIZE = [128]  # [sequence length]
VOCAB_SIZE = 30522
HIDDEN = 256
LAYERS = 4
HEADS = 4
MAX_POSITIONS = 512


def input_shapes(batch: int, input_size: list[int]) -> dict[str, tuple[tuple[int, ...], str]]:
    (seq,) = input_size
    return {"input_ids": ((batch, seq), "int64"), "attention_mask": ((batch, seq), "int64")}


CLS, SEP, PAD = 101, 102, 0  # BERT's WordPiece ids
FIRST_WORD = 1996  # BERT's uncased vocabulary lists its words from here, most frequent first ("the", ...)
ZIPF_EXPONENT = 1.1  # word frequencies in English text fall off about as 1 / rank


def example_inputs(batch: int, input_size: list[int], seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids that look like tokenized text: `[CLS]`, words drawn with a frequency-shaped
    (Zipf) distribution over the vocabulary's word ids, `[SEP]`, then padding (mask 0). Lengths
    vary per sample (log-normal around a quarter of the sequence, as sentences are short
    beside a model's sequence length), so most samples are padded, as real batches are."""
    (seq,) = input_size
    rng = np.random.default_rng(seed)
    words = VOCAB_SIZE - FIRST_WORD
    ids = np.full((batch, seq), PAD, dtype=np.int64)
    mask = np.zeros((batch, seq), dtype=np.int64)
    for row in range(batch):
        length = int(np.clip(round(rng.lognormal(np.log(max(2.0, seq / 4)), 0.6)), min(3, seq), seq))
        ranks = rng.zipf(ZIPF_EXPONENT, size=length)
        ranks = np.where(ranks > words, rng.integers(1, words + 1, size=length), ranks)  # the long tail, uniform
        ids[row, :length] = FIRST_WORD + ranks - 1
        ids[row, 0] = CLS
        if length > 1:
            ids[row, length - 1] = SEP
        mask[row, :length] = 1
    return {"input_ids": ids, "attention_mask": mask}


def dynamic_shapes(batch_dim) -> dict[str, dict[int, object]]:
    """`torch.export` dynamic shapes with a dynamic batch (axis 0) on every input."""
    return {name: {0: batch_dim} for name in INPUT_NAMES}


def _cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.reshape(a.shape[0], -1).astype(np.float64)
    b = b.reshape(b.shape[0], -1).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = np.sum(a * b, axis=1)
    return np.where(norms > 0, dots / np.maximum(norms, 1e-300), np.where(np.all(a == b, axis=1), 1.0, 0.0))


def padding_mask(inputs: dict[str, np.ndarray] | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """The attention mask among a model's `inputs` ([batch, seq] of 0/1, named "...mask..."),
    if it fits a hidden state of `shape` ([batch, seq, ...])."""
    for name, value in (inputs or {}).items():
        if "mask" in name.lower() and np.shape(value) == tuple(shape[:2]):
            return np.asarray(value) != 0
    return None


def agreement(
    reference: list[np.ndarray], outputs: list[np.ndarray], inputs: dict[str, np.ndarray] | None = None
) -> Agreement:
    """The lowest per-sample cosine of the last hidden state. Given the `inputs`, only the
    tokens their attention mask keeps count: padded positions' outputs are what no one reads
    (pooling masks them), and the ones quantization moves most."""
    ref, out = reference[0], outputs[0]
    if len(outputs) != len(reference) or any(r.shape != o.shape for r, o in zip(reference, outputs, strict=False)):
        return Agreement(0.0, "min_cosine", {"shape_mismatch": 1.0})
    mask = padding_mask(inputs, ref.shape) if ref.ndim >= 2 else None
    if mask is not None:
        keep = mask.reshape(*mask.shape, *([1] * (ref.ndim - 2)))
        ref, out = np.where(keep, ref, 0), np.where(keep, out, 0)
    cosine = _cosine_rows(ref, out)
    score = float(np.clip(np.min(cosine), 0.0, 1.0)) if cosine.size else 1.0
    return Agreement(
        score,
        "min_cosine",
        {
            "mean_cosine": float(np.mean(cosine)) if cosine.size else 1.0,
            "max_abs_diff": max_abs_diff(reference, outputs),
        },
    )


OUTLIER_SCALE = 100.0  # a pretrained BERT's outlier channels reach a hundred times the others' magnitude


def build_example_model(input_size: list[int] | None = None, outlier_channels: int = 0, attention_scale: float = 1.0):
    """A 4-layer BERT-style encoder (hidden 256, 4 heads, vocab 30522), seeded, in eval mode.

    `input_size` ([sequence length]) only bounds the position table, which holds 512. With
    `outlier_channels`, that many hidden channels of every LayerNorm are scaled by
    `OUTLIER_SCALE`: the outlier features of pretrained BERTs, which random weights lack and
    which cost static int8 (activation ranges calibrated per tensor) most of its agreement.
    `attention_scale` scales the query and key weights: above about 5 the attention is peaked
    as a trained model's is (at 1, random weights attend almost uniformly, and an attention
    quantized flat goes unnoticed)."""
    import math

    import torch
    from torch import nn

    seq = (input_size or DEFAULT_INPUT_SIZE)[0]
    if seq > MAX_POSITIONS:
        raise ValueError(f"sequence length {seq} exceeds the {MAX_POSITIONS} positions of the example encoder")

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.out = nn.Linear(HIDDEN, HIDDEN)
            self.head_dim = HIDDEN // HEADS

        def forward(self, x, bias):
            batch, length, _ = x.shape
            q, k, v = self.qkv(x).split(HIDDEN, dim=-1)
            q = q.reshape(batch, length, HEADS, self.head_dim).transpose(1, 2)
            k = k.reshape(batch, length, HEADS, self.head_dim).transpose(1, 2)
            v = v.reshape(batch, length, HEADS, self.head_dim).transpose(1, 2)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + bias
            context = torch.matmul(torch.softmax(scores, dim=-1), v)
            return self.out(context.transpose(1, 2).reshape(batch, length, HIDDEN))

    class EncoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = SelfAttention()
            self.norm1 = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.ffn = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))
            self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-12)

        def forward(self, x, bias):
            x = self.norm1(x + self.attention(x, bias))
            return self.norm2(x + self.ffn(x))

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(VOCAB_SIZE, HIDDEN)
            self.positions = nn.Embedding(MAX_POSITIONS, HIDDEN)
            self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
            self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
            self.pooler = nn.Linear(HIDDEN, HIDDEN)

        def forward(self, input_ids, attention_mask):
            length = input_ids.shape[1]
            positions = torch.arange(length, device=input_ids.device).unsqueeze(0)
            x = self.norm(self.tokens(input_ids) + self.positions(positions))
            # Padding gets a large finite negative bias (not -inf: a fully padded row stays finite).
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            for layer in self.layers:
                x = layer(x, bias)
            pooled = torch.tanh(self.pooler(x[:, 0]))
            return x, pooled

    torch.manual_seed(0)
    model = Encoder()
    with torch.no_grad():  # BERT's initialization scale, so activations stay in a realistic range
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, 0.02)
            if isinstance(module, nn.Linear):
                module.bias.zero_()
        for module in model.modules():
            if isinstance(module, SelfAttention):
                module.qkv.weight[: 2 * HIDDEN] *= attention_scale
        if outlier_channels:  # a large constant in a few channels of the residual stream, scaled back by LayerNorm
            channels = torch.randperm(HIDDEN, generator=torch.Generator().manual_seed(1))[:outlier_channels]
            for layer in model.layers:
                layer.ffn[2].bias[channels] = OUTLIER_SCALE
                layer.norm2.weight[channels] = 1.0 / OUTLIER_SCALE
    return model.eval()
