"""Which combination to deploy, as stored: in a run's summary (`RunSummary.recommendation`,
`schemas/documents.py`) and in its announcement (`RunArchived.recommendation`,
`schemas/events.py`). `report/recommendation.py` computes it; combinations are named by their
labels (`Combo.label`)."""

from __future__ import annotations

from typing import Any

from schemas.flexible import Flexible


class Interval(Flexible):
    """A prediction's interval (about 95 %): [low, high] of p50, p99 and the cold start, in ms."""

    level: str | None = None
    p50: list[float]
    p99: list[float]
    cold_start_ms: list[float] | None = None


class Candidate(Flexible):
    p99_ms: float
    per_million_inferences_usd: float
    balance_score: float


class Criteria(Flexible):
    slo_p99_ms: float | None = None
    min_agreement: float
    balance_weight: float = 0.5
    fastest_by: str = "p99"


class PickCheckReport(Flexible):
    """What checking one predicted pick found (`predict` runs)."""

    combination: str
    picked_as: list[str]
    predicted_p50_ms: float
    predicted_p99_ms: float
    interval: Interval
    measured: bool
    verdict: str
    measured_p50_ms: float | None = None
    measured_p99_ms: float | None = None
    within_interval: bool | None = None


class Recommendation(Flexible):
    """Which combination to deploy (`report/recommendation.py`); combinations named by their labels."""

    fastest: str | None = None
    cheapest: str | None = None
    balanced: str | None = None
    pareto: list[str] = []
    candidates: dict[str, Candidate] = {}
    excluded: dict[str, str] = {}  # label -> why it cannot be recommended
    criteria: Criteria | None = None
    disturbed: list[str] = []
    checks: list[PickCheckReport] | None = None

    def pick(self, kind: str) -> str | None:
        """The label picked as `kind` (fastest, cheapest, balanced)."""
        return getattr(self, kind)

    def with_checks(self, checks: list[PickCheckReport | dict[str, Any]]) -> Recommendation:
        """This recommendation with what checking its predicted picks found."""
        return self.model_copy(update={"checks": [PickCheckReport.model_validate(c) for c in checks]})
