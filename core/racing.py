"""Racing: measure every combination briefly, then to full precision only those that can
still be an answer.

A run of precision `quick` (`RequestSubmitted.precision`, the default) measures each
combination with a quarter of the timing budget (`QUICK_TIME_CAP_SHARE`): rough figures with
95 % intervals. `race` then splits them:
- contenders: could still be fastest, cheapest, balanced, within the SLO or on the Pareto
  front: they are measured again to full precision (the refined result replaces the quick one);
- dominated: another combination's worst case (its interval's upper bound) beats its best case
  (lower bound) on both p99 and cost: it cannot be any of the answers. It stops at its rough
  figures, shown as "dominated by X" with both intervals (`Domination.evidence`);
- out: cannot be an answer for a reason timing precision does not change (it disagrees with
  base, is emulated, host-limited...), or its p99's lower bound is above the SLO.

With `predict` a family (hardware, optimizer, batch) stops only when none of its sizes, measured
or predicted, is a contender: its predicted sizes rest on all of its anchors.

Intervals: the p99's is the distribution-free interval of its order statistics
(`measuring/measure.py`), the cost's the mean's (1.96 cv / sqrt(n), the billed duration is a
mean); both widened by `RUN_TO_RUN_SLACK`, as a combination measured again in another process
moves more than one process's samples say. Predicted rows carry their own interval.

Pure functions of figures (`Figures`): the archiver builds them from results, the running answer
(`runs/{id}/answer.json`) keeps them, `picks` and `margins` read them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas.combos import Combo
from schemas.documents import SummaryResult

QUICK_TIME_CAP_SHARE = 0.25  # the quick pass times each combination for this share of the full time cap
RUN_TO_RUN_SLACK = 0.05  # every interval widened by this relative amount on each side
Z95 = 1.96
KINDS = ("fastest", "cheapest", "balanced")


@dataclass(frozen=True)
class Figures:
    """One combination's p99 and cost per million inferences, each with its 95 % interval."""

    label: str
    combo_key: str
    family: str  # racing stops a whole family at once (the combination itself without predict)
    p99: float
    p99_low: float
    p99_high: float
    cost: float
    cost_low: float
    cost_high: float
    precision: str = "exact"  # quick: the first pass's rough figures
    predicted: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Figures:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(frozen=True)
class Domination:
    label: str
    by: str
    evidence: dict[str, Any]

    @property
    def reason(self) -> str:
        e = self.evidence
        return (
            f"dominated by {self.by} (quick pass, 95 %): p99 {_span(e['p99'])} ms against {_span(e['by_p99'])} ms, "
            f"cost {_span(e['cost'], '$')} against {_span(e['by_cost'], '$')} per million inferences"
        )


@dataclass
class Race:
    contenders: list[str] = field(default_factory=list)  # labels measured to full precision
    dominated: dict[str, Domination] = field(default_factory=dict)
    out: dict[str, str] = field(default_factory=dict)  # label -> why it cannot be an answer whatever its timing

    @classmethod
    def of(cls, data: dict[str, Any]) -> Race:
        """A race as `as_dict` wrote it."""
        return cls(
            contenders=list(data.get("contenders") or []),
            dominated={
                k: Domination(label=k, by=d["by"], evidence=d["evidence"])
                for k, d in (data.get("dominated") or {}).items()
            },
            out=dict(data.get("out") or {}),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "contenders": self.contenders,
            "dominated": {
                k: {"by": d.by, "evidence": d.evidence, "reason": d.reason} for k, d in self.dominated.items()
            },
            "out": self.out,
        }


def _span(pair: list[float], unit: str = "") -> str:
    low, high = pair
    if unit == "$":
        return f"${low:.4g}-{high:.4g}"
    return f"{low:.3g}-{high:.3g}"


# Student's t (97.5 %) by degrees of freedom: a mean of a few samples is less certain than 1.96 says
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 15: 2.13, 20: 2.09}
TAIL_MIN_SAMPLES = 100  # below this a p99's upper bound is not in the samples (measuring/measure.py)
TAIL_SPREAD = 3.0  # then its worst case is taken as the p99 plus this many standard deviations


def t975(samples: int) -> float:
    df = samples - 1
    if df >= 30:
        return Z95
    return T975[max(k for k in T975 if k <= max(df, 1))]


def mean_half_width(cv: float | None, samples: int | None) -> float | None:
    """The relative half-width of the 95 % interval of a mean of `samples` with this CV."""
    if cv is None or not samples:
        return None
    return t975(samples) * cv / math.sqrt(samples)


def figures_of(row: SummaryResult, family: str | None = None) -> Figures | None:
    """The figures of a result row (a summary's typed row), or None without a cost or a p99
    interval (it cannot be raced: it stays a contender)."""
    latency = row.latency_ms
    cost = row.cost.per_million_inferences_usd if row.cost else None
    p99 = latency.p99
    if not cost or p99 is None:
        return None
    if row.predicted:
        if row.interval is None or not row.interval.p99:
            return None
        p99_low, p99_high = row.interval.p99
        p50_low, p50_high = row.interval.p50 or (latency.p50, latency.p50)
        half = max(latency.p50 - p50_low, p50_high - latency.p50) / latency.p50 if latency.p50 else 0.0
    else:
        p99_low, p99_high = latency.p99_ci95_low, latency.p99_ci95_high
        samples = latency.iterations
        half = mean_half_width(latency.cv, samples)
        if p99_low is None or p99_high is None or half is None:
            return None
        if samples < TAIL_MIN_SAMPLES:  # the p99 of a few samples is about their maximum: its worst case is beyond
            spread = TAIL_SPREAD * latency.cv * (latency.mean or p99)
            p99_high = max(p99_high, latency.max or p99, p99 + spread)
    label = row.combo.label
    slack = 1 + RUN_TO_RUN_SLACK
    return Figures(
        label=label,
        combo_key=row.combo_key or label,
        family=family or label,
        p99=p99,
        p99_low=min(p99_low, p99) / slack,
        p99_high=max(p99_high, p99) * slack,
        cost=cost,
        cost_low=cost * max(0.0, 1 - half) / slack,
        cost_high=cost * (1 + half) * slack,
        precision=row.precision or "exact",
        predicted=row.predicted,
    )


def family_of(combo: Combo) -> str:
    return f"{combo.hardware.value}/{combo.optimizer.value}/b{combo.batch_size}"


def dominates(winner: Figures, loser: Figures) -> bool:
    """`winner`'s worst case beats `loser`'s best case on both p99 and cost."""
    return winner.p99_high < loser.p99_low and winner.cost_high < loser.cost_low


def race(candidates: list[Figures], *, slo_p99_ms: float | None = None, out: dict[str, str] | None = None) -> Race:
    """Contenders, dominated (with the evidence) and out, of rows that may otherwise be recommended
    (`candidates`) and those that may not (`out`: label -> reason, kept as given)."""
    result = Race(out=dict(out or {}))
    eligible = []
    for f in candidates:
        if slo_p99_ms is not None and f.p99_low > slo_p99_ms:
            result.out[f.label] = (
                f"p99 {f.p99_low:.3g}-{f.p99_high:.3g} ms: above the SLO of {slo_p99_ms:g} ms with 95 % confidence"
            )
        else:
            eligible.append(f)
    beaten: dict[str, list[Figures]] = {
        f.label: [g for g in eligible if g is not f and dominates(g, f)] for f in eligible
    }
    for f in eligible:
        if not beaten[f.label]:
            result.contenders.append(f.label)
    live_families = {f.family for f in eligible if f.label in result.contenders}
    for f in eligible:
        if f.label in result.contenders:
            continue
        if f.family in live_families:  # another size of its family can still be an answer: it is measured too
            result.contenders.append(f.label)
            continue
        # name a dominator that is not dominated itself where there is one, the cheapest of those
        by = min(beaten[f.label], key=lambda g: (bool(beaten[g.label]), g.cost, g.p99))
        result.dominated[f.label] = Domination(
            label=f.label,
            by=by.label,
            evidence={
                "p99": [f.p99_low, f.p99_high],
                "cost": [f.cost_low, f.cost_high],
                "by_p99": [by.p99_low, by.p99_high],
                "by_cost": [by.cost_low, by.cost_high],
                "p99_ms": f.p99,
                "per_million_inferences_usd": f.cost,
                "precision": f.precision,
            },
        )
    return result


def picks(candidates: list[Figures], balance_weight: float = 0.5) -> dict[str, str | None]:
    """Fastest (p99), cheapest (cost) and balanced (`report/recommendation.balance_scores`'
    rule) among `candidates`, on their point figures."""
    if not candidates:
        return dict.fromkeys(KINDS)
    p99 = {f.label: f.p99 for f in candidates}
    cost = {f.label: f.cost for f in candidates}

    def normalised(values: dict[str, float]) -> dict[str, float]:
        low, high = min(values.values()), max(values.values())
        return {k: (v - low) / (high - low) if high > low else 0.0 for k, v in values.items()}

    p, c = normalised(p99), normalised(cost)
    score = {k: balance_weight * c[k] + (1 - balance_weight) * p[k] for k in p99}
    return {
        "fastest": min(p99, key=lambda k: (p99[k], cost[k])),
        "cheapest": min(cost, key=lambda k: (cost[k], p99[k])),
        "balanced": min(score, key=lambda k: (score[k], p99[k], cost[k])),
    }


def _relative(f: Figures, what: str) -> float:
    value, low, high = getattr(f, what), getattr(f, f"{what}_low"), getattr(f, f"{what}_high")
    return max(value - low, high - value) / value if value else 0.0


def margin(best: Figures, nxt: Figures, what: str) -> tuple[float, float]:
    """How much more `nxt` costs (or how much higher its p99 is) than `best`, in %, and the
    half-width of that difference's interval (relative errors added in quadrature)."""
    ratio = getattr(nxt, what) / getattr(best, what)
    spread = ratio * math.sqrt(_relative(best, what) ** 2 + _relative(nxt, what) ** 2)
    return (ratio - 1) * 100, spread * 100


def margins(candidates: list[Figures], chosen: dict[str, str | None]) -> dict[str, str]:
    """Each pick with its margin over the next best: "cheapest: A; the next, B, costs 31 % ± 4 % more"."""
    by_label = {f.label: f for f in candidates}
    out: dict[str, str] = {}
    for kind, what, phrase in (("cheapest", "cost", "costs {} more"), ("fastest", "p99", "has a p99 {} higher")):
        best = by_label.get(chosen.get(kind) or "")
        if best is None:
            continue
        rest = sorted((f for f in candidates if f.label != best.label), key=lambda f: getattr(f, what))
        if not rest:
            out[kind] = f"{kind}: {best.label} (the only candidate)"
            continue
        nxt = rest[0]
        value, spread = margin(best, nxt, what)
        out[kind] = f"{kind}: {best.label}; the next, {nxt.label}, " + phrase.format(f"{value:.0f} % ± {spread:.0f} %")
    if chosen.get("balanced"):
        out["balanced"] = f"balanced: {chosen['balanced']}"
    return out


def answer(
    rows: dict[str, Figures],
    race_result: Race | None,
    *,
    balance_weight: float,
    stage: str,
    refining: list[str],
) -> dict[str, Any]:
    """The running answer (`runs/{id}/answer.json`): picks among the rows that may be an answer,
    each pick's margin, what is dominated and why, and what is still being refined."""
    race_result = race_result or Race()
    shut = set(race_result.dominated) | set(race_result.out)
    candidates = [f for f in rows.values() if f.label not in shut]
    chosen = picks(candidates, balance_weight)
    return {
        "stage": stage,
        "balance_weight": balance_weight,
        "picks": chosen,
        "margins": margins(candidates, chosen),
        "rows": {k: f.as_dict() for k, f in rows.items()},
        "refining": sorted(refining),
        "measured_fully": sum(f.precision == "exact" and not f.predicted for f in rows.values()),
        **race_result.as_dict(),
    }


def answer_lines(doc: dict[str, Any]) -> list[str]:
    """The running answer as a few lines of text (the CLI, the page)."""
    rows = {k: Figures.of(v) for k, v in (doc.get("rows") or {}).items()}
    head = {
        "quick": "first answer (quick pass)",
        "refining": f"refining ({len(doc.get('refining') or [])} left)",
        "final": "answer",
    }.get(doc.get("stage", ""), doc.get("stage", ""))
    lines = [f"{head}:"]
    for kind in KINDS:
        label = (doc.get("picks") or {}).get(kind)
        if not label:
            continue
        f = rows.get(label)
        figures = (
            f" (p99 {f.p99:.3g} ms [{f.p99_low:.3g}-{f.p99_high:.3g}], "
            f"${f.cost:.4g}/M [{f.cost_low:.4g}-{f.cost_high:.4g}]{', quick' if f.precision == 'quick' else ''})"
            if f
            else ""
        )
        lines.append(f"  {(doc.get('margins') or {}).get(kind) or f'{kind}: {label}'}{figures}")
    for label, d in (doc.get("dominated") or {}).items():
        lines.append(f"  {label}: {d['reason']}")
    return lines
