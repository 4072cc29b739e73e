"""How closely an optimized engine's outputs match `base`'s, as one score in 0..1 plus details."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Agreement:
    score: float  # 0..1, compared against the run's minimum agreement
    metric: str  # what the score is
    details: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"score": self.score, "metric": self.metric, **self.details}


def max_abs_diff(reference: list[np.ndarray], outputs: list[np.ndarray]) -> float:
    return float(
        max(
            np.max(np.abs(r.astype(np.float64) - o.astype(np.float64))) if r.size else 0.0
            for r, o in zip(reference, outputs, strict=True)
        )
    )
