"""Two runs compared (`ayci compare`, `ayci gate`, `GET /runs/{a}/compare/{b}`): combinations
matched by hardware, optimizer, batch and memory size; for each, p50, p99, cold start, cost per
million, peak memory and agreement, the change and a verdict (faster, slower or within noise);
what differs between the runs (the model, its input size, the environment).

`compare` is a pure function of two stored `RunSummary` documents and the history of each
combination (the earlier versions of its result, `keys.result_version`,
read by `stored_history`). Noise is never one run's sampling error alone: each figure's 95 %
interval (both results') is widened by the variation between repeated measurements of the same
combination (its history, leaving out the two results compared: with them in, any difference
would explain itself away); without history of its own, by the variation pooled from the other
combinations' histories; without any, by an assumed variation (`ASSUMED_BETWEEN_RUNS`).
Shared machines vary more between runs than within one (mui-public PR #1712: a t-test on one
run's samples raised false alarms from 41 % to 60 %).

`gate` turns a comparison into regressions: a figure worse beyond its threshold AND beyond noise.
A pinned baseline (`Baseline`) carries its run's summary and history, so a CI job needs no store
holding the baseline run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel

from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.documents import Document, MeasuredResult, RunSummary, SummaryResult
from schemas.events import SchemaError

Z95 = 1.96

# Between-run variation (relative standard deviation; agreement: absolute) assumed when no
# combination of either run has history: what repeated runs of one combination vary by on a
# shared 2-core host (p99 and cold starts move more than the median). Figures from history are
# never taken below the floor (two or three versions can agree by chance).
ASSUMED_BETWEEN_RUNS = {
    "p50_ms": 0.025,
    "p99_ms": 0.06,
    "cold_start_ms": 0.15,
    "cost_per_million_usd": 0.025,
    "peak_memory_mb": 0.03,
    "agreement": 0.002,
}
BETWEEN_RUNS_FLOOR = {
    "p50_ms": 0.01,
    "p99_ms": 0.03,
    "cold_start_ms": 0.05,
    "cost_per_million_usd": 0.01,
    "peak_memory_mb": 0.01,
    "agreement": 0.0005,
}


@dataclass(frozen=True)
class Figure:
    key: str
    title: str
    worse: str  # the verdict when B is worse beyond noise
    better: str
    relative: bool = True  # changes in % (agreement: absolute points)
    higher_is_worse: bool = True


FIGURES = (
    Figure("p50_ms", "p50 ms", "slower", "faster"),
    Figure("p99_ms", "p99 ms", "slower", "faster"),
    Figure("cold_start_ms", "cold start ms", "slower", "faster"),
    Figure("cost_per_million_usd", "$ per million", "costlier", "cheaper"),
    Figure("peak_memory_mb", "peak MB", "larger", "smaller"),
    Figure("agreement", "agreement", "lower", "higher", relative=False, higher_is_worse=False),
)
WITHIN_NOISE = "within noise"
TITLES = {figure.key: figure.title for figure in FIGURES}


class HistoryPoint(BaseModel):
    """One stored measurement of a combination, the figures the comparison reads."""

    run_id: str
    measured_at: str | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    cold_start_ms: float | None = None
    billed_ms_mean: float | None = None  # the cost's variation follows the billed time's
    peak_memory_mb: float | None = None
    agreement: float | None = None

    @classmethod
    def of(cls, result: MeasuredResult) -> HistoryPoint:
        return cls(
            run_id=result.run_id,
            measured_at=result.measured_at,
            p50_ms=result.latency_ms.p50,
            p99_ms=result.latency_ms.p99,
            cold_start_ms=result.cold_start_ms.total,
            billed_ms_mean=result.latency_ms.billed_ms_mean,
            peak_memory_mb=result.peak_rss_mb,
            agreement=result.agreement.score,
        )

    def value(self, figure: str) -> float | None:
        return self.billed_ms_mean if figure == "cost_per_million_usd" else getattr(self, figure)


History = Mapping[str, list[HistoryPoint]]  # combination key -> its stored measurements


class FigureChange(BaseModel):
    figure: str
    a: float | None
    b: float | None
    change: float | None = None  # b - a
    change_pct: float | None = None  # (b - a) / a, in % (relative figures)
    noise: float | None = None  # the 95 % band of a difference: in % (relative figures) or absolute (agreement)
    noise_basis: str = ""
    verdict: str = "n/a"


class CombinationComparison(BaseModel):
    combination: str
    key_a: str | None
    key_b: str | None
    verdict: str  # from p50 and p99: faster, slower, mixed or within noise
    figures: dict[str, FigureChange]
    notes: list[str] = []


class Difference(BaseModel):
    what: str
    a: str
    b: str


class Comparison(BaseModel):
    run_a: str
    run_b: str
    differences: list[Difference]
    combinations: list[CombinationComparison]
    only_in_a: list[str] = []
    only_in_b: list[str] = []
    noise: str = ""

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ---------------------------------------------------------------------------------------------
# the figures of a summary row


def _extra(model: BaseModel, name: str) -> float | None:
    value = getattr(model, name, None)
    return float(value) if isinstance(value, int | float) else None


def figure_value(result: SummaryResult, figure: str) -> float | None:
    if figure == "p50_ms":
        return result.latency_ms.p50
    if figure == "p99_ms":
        return result.latency_ms.p99
    if figure == "cold_start_ms":
        return result.cold_start_ms.total if result.cold_start_ms else None
    if figure == "cost_per_million_usd":
        return result.cost.per_million_inferences_usd if result.cost else None
    if figure == "peak_memory_mb":
        return result.peak_rss_mb
    if figure == "agreement":
        return result.agreement.score if result.agreement else None
    raise KeyError(figure)


def interval_half(result: SummaryResult, figure: str) -> float:
    """Half the result's own 95 % interval of the figure, relative to it (0 when it has none:
    a cold start is one sample, memory and agreement are not sampled)."""
    latency = result.latency_ms
    if figure in ("p50_ms", "cost_per_million_usd"):  # the cost follows the billed (mean) time
        low, high, centre = _extra(latency, "ci95_low"), _extra(latency, "ci95_high"), latency.p50
    elif figure == "p99_ms":
        low, high, centre = _extra(latency, "p99_ci95_low"), _extra(latency, "p99_ci95_high"), latency.p99
    else:
        return 0.0
    if low is None or high is None or not centre:
        return 0.0
    return max(0.0, (high - low) / 2 / centre)


def _spread(points: list[HistoryPoint], figure: str, relative: bool) -> float | None:
    """The standard deviation of a figure over repeated measurements (relative to their median),
    estimated robustly from three on (1.4826 x the median absolute deviation): one measurement
    taken in a busy moment must not make every later change look like noise."""
    values = [v for v in (p.value(figure) for p in points) if v is not None]
    if len(values) < 2:
        return None
    centre = statistics.median(values)
    if len(values) == 2:
        deviation = statistics.stdev(values)
    else:
        deviation = MAD_TO_SD * statistics.median(abs(v - centre) for v in values)
    if not relative:
        return deviation
    return deviation / centre if centre else None


MAD_TO_SD = 1.4826  # the median absolute deviation of normal samples times this is their standard deviation


# ---------------------------------------------------------------------------------------------
# the comparison


def _measured(summary: RunSummary) -> dict[str, SummaryResult]:
    return {r.label: r for r in summary.results if not r.predicted}


def _others(history: History, key: str | None, leave_out: set[str]) -> list[HistoryPoint]:
    return [p for p in history.get(key or "", []) if p.run_id not in leave_out]


def compare(a: RunSummary, b: RunSummary, history: History | None = None, b_repeats: Iterable[str] = ()) -> Comparison:
    """Run `b` against run `a`: every combination measured in both, matched by hardware,
    optimizer, batch and memory size (predicted rows are not compared). `history` holds the
    stored measurements of each combination key (`stored_history`); none: assumed variation.
    `b_repeats`: runs that re-measured b's combinations (`ayci gate --confirm`): b's figures are
    then the median of b and them, and their spread is b's between-run variation."""
    history = history or {}
    b_runs = set(b_repeats)
    rows_a, rows_b = _measured(a), _measured(b)
    matched = [label for label in rows_a if label in rows_b]
    groups_b = {label: _b_group(history, rows_b[label], b_runs) for label in matched}
    others = {}
    for label in matched:
        leave_out = {rows_a[label].run_id or "", rows_b[label].run_id or "", *b_runs}
        own_b = groups_b[label] if len(groups_b[label]) > 1 else None  # b's repeats: their spread is b's
        others[label] = (
            _others(history, rows_a[label].combo_key, leave_out),
            own_b or _others(history, rows_b[label].combo_key, leave_out),
        )
    pooled = {figure.key: _pooled(others.values(), figure) for figure in FIGURES}
    combinations = [
        _compare_one(
            rows_a[label],
            rows_b[label],
            others[label],
            pooled,
            [p for p in _baseline_repeats(history, rows_a[label], rows_b[label]) if p.run_id not in b_runs],
            groups_b[label],
        )
        for label in sorted(matched, key=_order)
    ]
    labels_a = {r.label for r in a.results} | {f.label for f in a.failures}
    labels_b = {r.label for r in b.results} | {f.label for f in b.failures}
    return Comparison(
        run_a=a.run_id,
        run_b=b.run_id,
        differences=differences(a, b),
        combinations=combinations,
        only_in_a=sorted((labels_a - set(matched)), key=_order),
        only_in_b=sorted((labels_b - set(matched)), key=_order),
        noise=(
            "a change is within noise when it is inside the 95 % band of a difference: both results' intervals "
            "widened by the variation between repeated measurements of the combination (its stored history, the "
            "two results compared left out; else pooled from the other combinations; else assumed)"
        ),
    )


def _order(label: str) -> tuple:
    hardware, optimizer, batch, memory = label.split("/")
    return hardware, optimizer, int(batch[1:]), int(memory.removesuffix("MB"))


def _pooled(others: Iterable[tuple[list[HistoryPoint], list[HistoryPoint]]], figure: Figure) -> tuple[float, int]:
    """The median variation of the combinations with history (and how many), for those without."""
    spreads = [s for pair in others for s in (_spread(p, figure.key, figure.relative) for p in pair) if s is not None]
    return (statistics.median(spreads), len(spreads)) if spreads else (math.nan, 0)


def _between(
    points: list[HistoryPoint], figure: Figure, pooled: tuple[float, int]
) -> tuple[float, str]:  # (relative std, its basis)
    own = _spread(points, figure.key, figure.relative)
    floor = BETWEEN_RUNS_FLOOR[figure.key]
    if own is not None:
        return max(own, floor), f"history of {len([p for p in points if p.value(figure.key) is not None])}"
    if pooled[1]:
        return max(pooled[0], floor), f"pooled from {pooled[1]} histories"
    return ASSUMED_BETWEEN_RUNS[figure.key], "assumed"


def _b_group(history: History, rb: SummaryResult, b_runs: set[str]) -> list[HistoryPoint]:
    """b's measurement and its re-measurements (`b_runs`); [] when b's is not stored."""
    if not b_runs:
        return []
    points = [p for p in history.get(rb.combo_key or "", []) if p.run_id == rb.run_id or p.run_id in b_runs]
    return points if any(p.run_id == rb.run_id for p in points) else []


def _baseline_repeats(history: History, ra: SummaryResult, rb: SummaryResult) -> list[HistoryPoint]:
    """A's measurement and the repeats of its combination measured up to it (a baseline pinned
    after measuring it several times), never B's; [] when A is not among them."""
    a_at = getattr(ra, "measured_at", None)
    points = [
        p
        for p in history.get(ra.combo_key or "", [])
        if p.run_id != rb.run_id and (p.run_id == ra.run_id or (a_at and p.measured_at and p.measured_at <= a_at))
    ]
    return points if any(p.run_id == ra.run_id for p in points) else []


def _level(ra: SummaryResult, repeats: list[HistoryPoint], figure: str) -> tuple[float | None, int]:
    """The baseline's figure: the median of its repeats when it has several (one measurement
    can be an outlier the whole comparison then leans on), else A's own; and how many."""
    own = figure_value(ra, figure)
    values = [v for v in (p.value(figure) for p in repeats) if v is not None]
    if own is None or len(values) < 2:
        return own, 1
    if figure == "cost_per_million_usd":  # the cost follows the billed time: A's cost at the median billed time
        billed = ra.latency_ms.billed_ms_mean
        return (own * statistics.median(values) / billed, len(values)) if billed else (own, 1)
    return statistics.median(values), len(values)


MEDIAN_VARIANCE = math.pi / 2  # a median's variance over a mean's, for normal samples


def _compare_one(
    ra: SummaryResult,
    rb: SummaryResult,
    others: tuple[list[HistoryPoint], list[HistoryPoint]],
    pooled: dict[str, tuple[float, int]],
    repeats: list[HistoryPoint],
    b_group: list[HistoryPoint],
) -> CombinationComparison:
    figures = {}
    for figure in FIGURES:
        (va, count), (vb, count_b) = _level(ra, repeats, figure.key), _level(rb, b_group, figure.key)
        if va is None or vb is None:
            figures[figure.key] = FigureChange(figure=figure.key, a=va, b=vb)
            continue
        (sa, basis_a), (sb, basis_b) = (_between(o, figure, pooled[figure.key]) for o in others)
        ha, hb = interval_half(ra, figure.key), interval_half(rb, figure.key)
        shrink = MEDIAN_VARIANCE / count if count > 1 else 1.0  # the baseline's level rests on `count` repeats
        shrink_b = MEDIAN_VARIANCE / count_b if count_b > 1 else 1.0
        noise = math.sqrt(ha**2 * shrink + hb**2 * shrink_b + (Z95**2) * (sa**2 * shrink + sb**2 * shrink_b))
        change = vb - va
        if figure.relative:
            scaled = change / va if va else math.inf
            noise_shown = 100 * noise
        else:
            scaled = change
            noise_shown = noise
        if abs(scaled) <= noise:
            verdict = WITHIN_NOISE
        else:
            verdict = figure.worse if (change > 0) == figure.higher_is_worse else figure.better
        basis = basis_a if basis_a == basis_b else f"{basis_a} / {basis_b}"
        figures[figure.key] = FigureChange(
            figure=figure.key,
            a=va,
            b=vb,
            change=change,
            change_pct=100 * scaled if figure.relative and math.isfinite(scaled) else None,
            noise=noise_shown,
            noise_basis=f"intervals + between runs ({basis})"
            + (f"; A: the median of {count} repeats" if count > 1 else "")
            + (f"; B: the median of {count_b} measurements" if count_b > 1 else ""),
            verdict=verdict,
        )
    notes = []
    for name, r in (("A", ra), ("B", rb)):
        if r.disturbed:
            notes.append(f"{name} was disturbed: {r.load.disturbance}")
        if not r.confined:
            notes.append(f"{name} was not confined to its memory size")
        if r.emulated:
            notes.append(f"{name} was emulated")
    return CombinationComparison(
        combination=ra.label,
        key_a=ra.combo_key,
        key_b=rb.combo_key,
        verdict=_latency_verdict(figures["p50_ms"].verdict, figures["p99_ms"].verdict),
        figures=figures,
        notes=notes,
    )


def _latency_verdict(*verdicts: str) -> str:
    slower, faster = "slower" in verdicts, "faster" in verdicts
    if slower and faster:
        return "mixed"
    return "slower" if slower else "faster" if faster else WITHIN_NOISE


def _values(results: Iterable[SummaryResult], read: Callable[[SummaryResult], Any]) -> str:
    found = sorted({str(v) for v in (read(r) for r in results) if v not in (None, "", [], {})})
    return ", ".join(found) if found else "-"


def differences(a: RunSummary, b: RunSummary) -> list[Difference]:
    """What differs between the two runs: the model (its bytes, format, workload, input size,
    the inputs judged on), the request's thresholds, and each result's environment (CPU, Python,
    AYCI, library versions), named with both sides."""
    found: list[Difference] = []

    def note(what: str, va: Any, vb: Any) -> None:
        sa, sb = ("-" if v in (None, "") else str(v) for v in (va, vb))
        if sa != sb:
            found.append(Difference(what=what, a=sa, b=sb))

    note("model sha256", a.model.sha256[:12], b.model.sha256[:12])
    note("model format", a.model.format.value, b.model.format.value)
    note("workload", a.model.workload.value, b.model.workload.value)
    note("input size", "x".join(map(str, a.model.input_size)), "x".join(map(str, b.model.input_size)))
    note("inputs", (a.model.inputs_sha256 or "synthetic")[:12], (b.model.inputs_sha256 or "synthetic")[:12])
    for field in ("tuning_trials", "min_agreement", "price_region"):
        note(f"request {field}", a.request.get(field), b.request.get(field))
    measured_a = [r for r in a.results if not r.predicted]
    measured_b = [r for r in b.results if not r.predicted]
    for what, read in (
        ("CPU", lambda r: r.environment and r.environment.cpu_model),
        ("host cores", lambda r: r.environment and r.environment.host_cores),
        ("kernel", lambda r: r.environment and r.environment.kernel),
        ("Python", lambda r: r.environment and r.environment.python),
        ("AYCI", lambda r: r.environment and r.environment.ayci_version),
    ):
        note(what, _values(measured_a, read), _values(measured_b, read))
    libraries = sorted({name for r in [*measured_a, *measured_b] if r.environment for name in r.environment.libraries})
    for library in libraries:
        read = lambda r, library=library: r.environment and r.environment.libraries.get(library)
        note(library, _values(measured_a, read), _values(measured_b, read))
    return found


# ---------------------------------------------------------------------------------------------
# the store's history and the pinned baseline


def stored_history(store: ObjectStore, summaries: Iterable[RunSummary]) -> dict[str, list[HistoryPoint]]:
    """Every stored measurement (`keys.result_version`) of the combinations the
    summaries measured, oldest first. One listing per combination (a compare, not a run's path)."""
    history: dict[str, list[HistoryPoint]] = {}
    wanted = {r.combo_key for s in summaries for r in s.results if r.combo_key and not r.predicted}
    for combo_key in sorted(wanted):
        points = []
        for key in store.list_keys(keys.result_versions_prefix(combo_key)):
            name = key.rsplit("/", 1)[-1]
            if not name.endswith(".json") or name.count(".") != 1:  # profiles, traces
                continue
            try:
                points.append(HistoryPoint.of(MeasuredResult.read(store.get_bytes(key))))
            except (NotFound, SchemaError):
                continue
        history[combo_key] = sorted(points, key=lambda p: p.measured_at or "")
    return history


class Baseline(Document):
    """A run pinned as a baseline (`ayci baseline RUN_ID --out baseline.json`): its summary as
    stored and the history of its combinations, so a gate needs no store holding that run."""

    kind: Literal["ayci-baseline"] = "ayci-baseline"
    pinned_at: str
    summary: dict[str, Any]
    history: dict[str, list[HistoryPoint]] = {}

    @classmethod
    def pin(cls, summary: RunSummary, history: History) -> Baseline:
        keys_a = {r.combo_key for r in summary.results}
        return cls(
            kind="ayci-baseline",
            pinned_at=datetime.now(UTC).isoformat(),
            summary=summary.to_dict(),
            history={k: list(v) for k, v in history.items() if k in keys_a},
        )

    def run_summary(self) -> RunSummary:
        return RunSummary.read(self.summary)


# ---------------------------------------------------------------------------------------------
# the gate


class Thresholds(BaseModel):
    max_p99_regression_pct: float = 10.0
    max_cost_regression_pct: float = 5.0
    max_p50_regression_pct: float | None = None  # None: the p50 is not gated
    min_agreement: float | None = None


class Regression(BaseModel):
    combination: str
    figure: str
    a: float | None
    b: float | None
    change_pct: float | None = None
    threshold: str
    noise: float | None = None
    reason: str


class GateResult(BaseModel):
    passed: bool
    thresholds: Thresholds
    regressions: list[Regression]
    compared: int
    confirmations: int = 0  # re-measurements of the regressed combinations the regressions were judged on again
    unconfirmed: list[Regression] = []  # regressions a re-measurement did not repeat (not failing the gate)
    paired: list[PairedConfirmation] = []  # the combinations measured side by side with the baseline's artifact

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def gate(comparison: Comparison, thresholds: Thresholds) -> GateResult:
    """The combinations that regress: p99, cost (or p50, if given) worse than its threshold AND beyond noise (so
    a change is a regression only if it is both large and real), or agreement below the minimum.
    Nothing compared is an error to the caller, not a pass (`compared` says how many)."""
    regressions = []
    for combination in comparison.combinations:
        for key, limit, name in (
            ("p50_ms", thresholds.max_p50_regression_pct, "max p50 regression"),
            ("p99_ms", thresholds.max_p99_regression_pct, "max p99 regression"),
            ("cost_per_million_usd", thresholds.max_cost_regression_pct, "max cost regression"),
        ):
            figure = combination.figures[key]
            if (
                limit is None
                or figure.change_pct is None
                or figure.change_pct <= limit
                or figure.verdict == WITHIN_NOISE
            ):
                continue
            if figure.change_pct > 0 and figure.verdict in ("slower", "costlier"):
                regressions.append(
                    Regression(
                        combination=combination.combination,
                        figure=key,
                        a=figure.a,
                        b=figure.b,
                        change_pct=figure.change_pct,
                        threshold=f"{name} {limit:g} %",
                        noise=figure.noise,
                        reason=(
                            f"{TITLES[key]} {figure.a:.4g} → {figure.b:.4g} (+{figure.change_pct:.1f} %), beyond the "
                            f"{name} of {limit:g} % and beyond noise (±{figure.noise:.1f} % at 95 %, "
                            f"{figure.noise_basis})"
                        ),
                    )
                )
        agreement = combination.figures["agreement"]
        if thresholds.min_agreement is not None and agreement.b is not None and agreement.b < thresholds.min_agreement:
            regressions.append(
                Regression(
                    combination=combination.combination,
                    figure="agreement",
                    a=agreement.a,
                    b=agreement.b,
                    threshold=f"min agreement {thresholds.min_agreement:g}",
                    reason=(
                        f"agreement {agreement.b:.4f} is below the minimum {thresholds.min_agreement:g}"
                        + (f" (baseline {agreement.a:.4f})" if agreement.a is not None else "")
                    ),
                )
            )
    return GateResult(
        passed=not regressions, thresholds=thresholds, regressions=regressions, compared=len(comparison.combinations)
    )


def confirmed(
    a: RunSummary, b: RunSummary, confirmations: list[RunSummary], history: History, thresholds: Thresholds
) -> GateResult:
    """The gate of `b` against `a` after re-measuring b's regressed combinations
    (`confirmations`, `ayci gate --confirm N`, their measurements in `history`): b's figures
    are then the median of b and its re-measurements, judged against the spread among them, so
    one busy moment neither fails the gate nor hides a lasting change. Regressions the first
    judgment found and this one does not are `unconfirmed`."""
    later = {c.run_id for c in confirmations}
    before = {key: [p for p in points if p.run_id not in later] for key, points in history.items()}
    first = gate(compare(a, b, before), thresholds)  # as judged before re-measuring
    if first.passed or not confirmations:
        return first
    final = gate(compare(a, b, history, b_repeats=[c.run_id for c in confirmations]), thresholds)
    measured = f"the median of this run and {len(confirmations)} re-measurement(s)"
    found = {(r.combination, r.figure) for r in final.regressions}
    kept = [r.model_copy(update={"reason": f"{r.reason}; confirmed on {measured}"}) for r in final.regressions]
    dropped = [
        r.model_copy(update={"reason": f"{r.reason}; not confirmed on {measured}"})
        for r in first.regressions
        if (r.combination, r.figure) not in found
    ]
    return final.model_copy(update={"regressions": kept, "unconfirmed": dropped, "confirmations": len(confirmations)})


# ---------------------------------------------------------------------------------------------
# the paired confirmation: the baseline's artifact and the run's measured side by side, now

PAIRED_FIGURES = ("p50_ms", "p99_ms", "cost_per_million_usd")
PAIRED_LEVEL = 0.95
# The paired interval is never narrower than this either side of the estimate: its rounds share
# one process, and one artifact measured against itself in separate processes gave ratios from
# 0.986 to 1.02 (bench_gate.py), wider than one process's rounds say (each process's own layout).
PAIRED_FLOOR = 0.02


class PairedRound(BaseModel):
    """One round of a paired confirmation: the baseline's artifact (A) and the run's (B) measured
    one after the other (`order`: which first), each in its own confined process."""

    order: Literal["AB", "BA"]
    a: dict[str, float]  # figure -> value (p50_ms, p99_ms, cost_per_million_usd)
    b: dict[str, float]
    disturbed: bool = False  # other work took cores one of the two needed


class PairedFigure(BaseModel):
    """B over A from paired rounds: the Hodges-Lehmann estimate of the ratio (the median of the
    Walsh averages of the rounds' log ratios) and its distribution-free interval (the Wilcoxon
    signed-rank interval), `confidence` its exact coverage (95 % or more from 6 rounds on;
    fewer rounds: the widest interval, [min, max], and its lower confidence)."""

    figure: str
    ratio: float
    low: float
    high: float
    confidence: float
    rounds: int

    def text(self) -> str:
        """`x1.12 [1.09, 1.15]` (and the interval's confidence when it is not the usual 95 %)."""
        level = "" if self.confidence >= PAIRED_LEVEL else f" at {100 * self.confidence:.0f} %"
        return f"x{self.ratio:.3g} [{self.low:.3g}, {self.high:.3g}]{level}"


class PairedConfirmation(BaseModel):
    """A combination the gate suspected, confirmed by measuring the baseline's artifact and the
    run's alternately, now (`ayci/paired.py`); `unavailable` says why it could not be."""

    combination: str
    rounds: list[PairedRound] = []
    figures: dict[str, PairedFigure] = {}
    unavailable: str | None = None

    @classmethod
    def of(cls, combination: str, rounds: list[PairedRound]) -> PairedConfirmation:
        figures = {}
        for figure in PAIRED_FIGURES:
            found = paired_ratio([r.a.get(figure) for r in rounds], [r.b.get(figure) for r in rounds])
            if found is not None:
                figures[figure] = found.model_copy(update={"figure": figure})
        return cls(combination=combination, rounds=rounds, figures=figures)

    def said(self, figure: str) -> str:
        paired = self.figures[figure]
        return f"{paired.rounds} paired rounds: {paired.text()}"


def _signed_rank_cdf(n: int) -> list[float]:
    """P(W+ <= w) for w = 0 .. n(n+1)/2: the exact null distribution of Wilcoxon's signed-rank statistic."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = [0] * (len(counts) + rank)
        for w, c in enumerate(counts):
            grown[w] += c
            grown[w + rank] += c
        counts = grown
    total, running, cdf = 2**n, 0, []
    for c in counts:
        running += c
        cdf.append(running / total)
    return cdf


def paired_ratio(a: list[float | None], b: list[float | None], level: float = PAIRED_LEVEL) -> PairedFigure | None:
    """The ratio B/A from paired measurements (round i: a[i], b[i]): the Hodges-Lehmann estimate
    of the log ratio with its Wilcoxon signed-rank interval, exact and distribution-free, and
    robust to one round disturbed: the interval [W(k), W(M+1-k)] of the M sorted Walsh averages,
    k the largest with 2 P(W+ <= k-1) <= 1 - level (at least 1), never narrower than
    `PAIRED_FLOOR` either side. None without a positive pair."""
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True) if x and y and x > 0 and y > 0]
    n = len(logs)
    if not n:
        return None
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(n) for j in range(i, n))
    cdf = _signed_rank_cdf(n)
    k = 1
    while k < len(walsh) // 2 and 2 * cdf[k] <= 1 - level:  # k+1 keeps the level
        k += 1
    ratio = math.exp(statistics.median(walsh))
    return PairedFigure(
        figure="",
        ratio=ratio,
        low=min(math.exp(walsh[k - 1]), ratio / (1 + PAIRED_FLOOR)),
        high=max(math.exp(walsh[len(walsh) - k]), ratio * (1 + PAIRED_FLOOR)),
        confidence=max(0.0, 1 - 2 * cdf[k - 1]),
        rounds=n,
    )


def _gated(thresholds: Thresholds) -> list[tuple[str, float, str]]:
    return [
        (key, limit, name)
        for key, limit, name in (
            ("p50_ms", thresholds.max_p50_regression_pct, "max p50 regression"),
            ("p99_ms", thresholds.max_p99_regression_pct, "max p99 regression"),
            ("cost_per_million_usd", thresholds.max_cost_regression_pct, "max cost regression"),
        )
        if limit is not None
    ]


def suspected(comparison: Comparison, thresholds: Thresholds) -> list[str]:
    """The combinations a paired confirmation measures: those where a gated figure could be worse
    than its threshold (its change plus its noise band passes it). Wider than what regresses: a
    real slowdown the stored runs' noise hides is caught by the paired rounds, which are precise."""
    found = []
    for combination in comparison.combinations:
        for key, limit, _ in _gated(thresholds):
            figure = combination.figures[key]
            if figure.change_pct is not None and figure.change_pct + (figure.noise or 0.0) > limit:
                found.append(combination.combination)
                break
    return found


def judged_side_by_side(
    comparison: Comparison, first: GateResult, confirmations: Mapping[str, PairedConfirmation], thresholds: Thresholds
) -> GateResult:
    """The gate after paired confirmations: for each combination confirmed side by side, a gated
    figure regresses only when its paired ratio's whole interval lies beyond the threshold (the
    machine's drift between the baseline's measurement and the run's cancels in each round);
    regressions the stored runs showed and the rounds do not are `unconfirmed`. Combinations not
    confirmed (none measured, or `unavailable`) keep the first judgement, as do agreement
    regressions (agreement is not timed)."""
    regressions, unconfirmed = [], list(first.unconfirmed)
    for combination in comparison.combinations:
        label = combination.combination
        found = [r for r in first.regressions if r.combination == label]
        paired = confirmations.get(label)
        if paired is None or paired.unavailable:
            regressions += found
            continue
        regressions += [r for r in found if r.figure not in paired.figures]
        for key, limit, name in _gated(thresholds):
            if key not in paired.figures:
                continue
            figure, ratio = combination.figures[key], paired.figures[key]
            earlier = next((r for r in found if r.figure == key), None)
            runs = (
                f"{TITLES[key]} {figure.a:.4g} → {figure.b:.4g} ({figure.change_pct:+.1f} % ±{figure.noise:.1f} % "
                "between the stored runs)"
                if figure.change_pct is not None and figure.a is not None and figure.b is not None
                else TITLES[key]
            )
            if ratio.low > 1 + limit / 100:
                regressions.append(
                    Regression(
                        combination=label,
                        figure=key,
                        a=figure.a,
                        b=figure.b,
                        change_pct=100 * (ratio.ratio - 1),
                        threshold=f"{name} {limit:g} %",
                        noise=100 * (ratio.high - ratio.low) / 2,
                        reason=f"{runs}; confirmed by {paired.said(key)}, beyond the {name} of {limit:g} %",
                    )
                )
            elif earlier is not None:
                unconfirmed.append(
                    earlier.model_copy(
                        update={
                            "reason": f"{earlier.reason}; not confirmed by {paired.said(key)}, not wholly beyond "
                            f"the {name} of {limit:g} %"
                        }
                    )
                )
    measured = [c for c in confirmations.values() if not c.unavailable]
    return first.model_copy(
        update={
            "passed": not regressions,
            "regressions": regressions,
            "unconfirmed": unconfirmed,
            "confirmations": max((len(c.rounds) for c in measured), default=first.confirmations),
            "paired": list(confirmations.values()),
        }
    )


GateResult.model_rebuild()
