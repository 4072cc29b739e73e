"""How closely an optimized engine's outputs match `base`'s, as one score in 0..1 plus details.

A score rests on what it was judged on: `samples` (how many inputs) and `inputs` (`synthetic`:
the workload's made-up examples; `user`: the user's own `--inputs`; `tokenized`: the shipped
sentences tokenized by the user's `--tokenizer`). At least
`AGREEMENT_SAMPLES` samples whatever the batch size: at batch 1, 32 batches (`over_batches`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

AGREEMENT_SAMPLES = 32  # an agreement is judged on at least this many samples, whatever the batch size
SYNTHETIC, USER = "synthetic", "user"  # what an agreement's inputs were
TOKENIZED = "tokenized"  # the shipped sentences, tokenized by the user's tokenizer (`workloads/tokenized.py`)


@dataclass
class Agreement:
    score: float  # 0..1, compared against the run's minimum agreement
    metric: str  # what the score is
    details: dict[str, float] = field(default_factory=dict)
    samples: int | None = None  # how many samples the score rests on
    inputs: str | None = None  # SYNTHETIC, USER or TOKENIZED

    def as_dict(self) -> dict:
        basis = {"samples": self.samples, "inputs": self.inputs} if self.samples is not None else {}
        return {"score": self.score, "metric": self.metric, **self.details, **basis}


def batches_for(batch: int, samples: int = AGREEMENT_SAMPLES) -> int:
    """How many batches of `batch` hold at least `samples` samples."""
    return max(1, -(-samples // max(1, batch)))


def max_abs_diff(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    return float(
        max(
            np.max(np.abs(r.astype(np.float64) - o.astype(np.float64))) if r.size else 0.0
            for r, o in zip(reference, outputs, strict=True)
        )
    )


def over_batches(
    judge: Callable[..., Agreement],
    references: list[list[np.ndarray]],
    outputs: list[list[np.ndarray]],
    *,
    samples: int,
    inputs: str,
    fed: list[dict[str, np.ndarray]] | None = None,
) -> Agreement:
    """The workload's `judge` over several batches as one: each output joined along the batch
    axis and judged once (a lowest cosine is the lowest over every sample, a top-1 the share of
    all samples); where the batches' outputs do not join (their shapes differ past the batch
    axis, or they have none), each batch is judged and the lowest score kept. `fed`, the inputs
    of each batch, go to a judge that reads them (`inputs=`: the NLP one counts only the tokens
    the attention mask keeps)."""
    reads_inputs = fed is not None and "inputs" in inspect.signature(judge).parameters

    def judged(reference, produced, given):
        return judge(reference, produced, inputs=given) if reads_inputs else judge(reference, produced)

    try:
        count = len(references[0])
        if any(len(r) != count for r in [*references, *outputs]):
            raise ValueError("the batches have different numbers of outputs")
        joined_reference = [np.concatenate([np.asarray(r[i]) for r in references]) for i in range(count)]
        joined_outputs = [np.concatenate([np.asarray(o[i]) for o in outputs]) for i in range(count)]
        joined_inputs = {k: np.concatenate([b[k] for b in fed]) for k in fed[0]} if reads_inputs else None
    except (ValueError, IndexError):  # scalars, or shapes that differ past the batch axis
        agreement = min(
            (
                judged(r, o, fed[j] if reads_inputs else None)
                for j, (r, o) in enumerate(zip(references, outputs, strict=True))
            ),
            key=lambda a: a.score,
        )
    else:
        agreement = judged(joined_reference, joined_outputs, joined_inputs)
    agreement.samples, agreement.inputs = samples, inputs
    return agreement
