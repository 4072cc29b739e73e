"""Measure three sizes, predict the rest (`--predict`; `core/run_plan.py` picks the sizes).

Lambda gives a function `memory / 1,769` vCPUs (at most 6) as a CFS quota
(`schemas/lambda_limits.py`), and AYCI runs an
engine with `floor(vCPUs)` threads (at least one; `measuring/launcher.py`). So the
latency of one combination family (hardware, optimizer, batch) at a memory size is decided by
two things it knows exactly, and the model below has one part per regime:

- **below 1 vCPU** one thread gets `vCPUs x 100 ms` of CPU per 100 ms period and stalls for the
  rest of it. The latency distribution is simulated: work drawn from the 1-vCPU anchor's
  measured distribution runs back to back through the quota, as the measurement loop runs it.
  The smallest measured size calibrates the simulation (a work factor from its mean latency,
  ratios for its p50, p99 and cold start), interpolated in log(vCPUs) between it and 1 vCPU;
- **1 to 2 vCPUs** one thread, never throttled: the 1-vCPU anchor's latency (memory beyond
  the model's peak buys nothing else);
- **2 or more vCPUs** `floor(vCPUs)` threads: Amdahl's `T(n) = A + B / n` through the 1-vCPU
  (1,769 MB) and 2-vCPU (3,538 MB) anchors; 3 to 6 threads are beyond the measured range.

Memory: a size below the measured peak plus `FIT_MARGIN` (or at or below a size that ran out
of memory) will not fit; the smallest size that fits is named.

Intervals (about 95 %) combine the anchors' own confidence intervals with the model's error
per regime (`MODEL_ERROR`, checked by `bench/bench_prediction.py`). A family whose anchors
contradict the model beyond noise (slower with more vCPUs, faster with fewer) gets no
prediction in that regime, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from core.run_plan import FIT_MARGIN, ONE_VCPU_MB, TWO_VCPU_MB
from schemas.combos import Combo, combo_key
from schemas.cost import UnknownPriceRegion, cost_block
from schemas.documents import ColdStartTotal, FailedCombination, Interval, Latency, Prediction, SummaryResult
from schemas.events import FailureStage, RequestSubmitted
from schemas.lambda_limits import CPU_PERIOD_US, lambda_threads, lambda_vcpus

CPU_PERIOD_MS = CPU_PERIOD_US / 1000
NOISE = 0.05  # differences below 5 % (or the anchors' CIs) are noise, not a contradiction
# the model's own relative error per regime (one side of an about-95 % interval): the 95th
# percentile of the p50 errors of bench/bench_prediction.py on this host (two runs, 58
# predictions of 7 models; sizes in the same regime differed from each other by up to 13 % in
# one run: much of it is the measurements' own noise); the anchors' CIs are added to it
MODEL_ERROR = {
    "anchor": 0.0,
    "same_threads": 0.10,
    "throttled": 0.12,
    "throttled_below": 0.15,
    "throttled_uncalibrated": 0.15,
    "threads": 0.08,
    "threads_beyond": 0.12,  # per thread beyond the measured two: 0.12 at 3, 0.24 at 4...
}
P99_ERROR_FACTOR = 2.0  # the p99 moves more than the p50
COLD_START_ERROR = 0.20
SIMULATED_INFERENCES = 4000


def relative_ci(stat: Callable[[str], float | None], which: str) -> float:
    """Half the 95 % CI of a measurement's p50 or p99 (`which`), relative to it; `stat` reads one
    of its latency figures by name (None if absent). 5 % (p50) or 15 % (p99) without a CI."""
    low, high = (
        (stat("ci95_low"), stat("ci95_high")) if which == "p50" else (stat("p99_ci95_low"), stat("p99_ci95_high"))
    )
    if low is None or high is None or not stat(which):
        return 0.05 if which == "p50" else 0.15
    return (high - low) / 2 / stat(which)


@dataclass(frozen=True)
class Anchor:
    """A measured size of a family: its memory size and its row (a stored row is validated
    once, here)."""

    memory_mb: int
    result: SummaryResult

    def __post_init__(self) -> None:
        object.__setattr__(self, "result", SummaryResult.of(self.result))

    @property
    def latency(self) -> Latency:
        return self.result.latency_ms

    def stat(self, which: str) -> float | None:
        """One of its latency figures (p50, p90, p95, p99, mean), None if it has none."""
        return getattr(self.latency, which, None)

    def rel_ci(self, which: str) -> float:
        """Half the 95 % CI of the p50 or p99, relative to it."""
        return relative_ci(self.stat, which)

    @property
    def cold_ms(self) -> float:
        return self.result.cold_start_ms.total

    @property
    def peak_mb(self) -> float:
        return max(self.result.cgroup_peak_mb or 0.0, self.result.peak_rss_mb or 0.0)

    @property
    def usable(self) -> bool:
        """Timed natively as Lambda would run it."""
        r = self.result
        return not r.emulated and not r.host_limited and r.confined is not False


def latency_quantiles(latency: Latency | dict) -> list[tuple[float, float]]:
    """(quantile, ms) points of a result's latency stats (a predicted row has no min or max:
    its p50 and p99 stand in)."""
    if isinstance(latency, Latency):
        latency = latency.model_dump(exclude_none=True)
    return [
        (0.0, latency.get("min", latency["p50"])),
        (0.5, latency["p50"]),
        (0.9, latency.get("p90", latency["p50"])),
        *([(0.95, latency["p95"])] if latency.get("p95") is not None else []),  # kept since the p95 is measured
        (0.99, latency["p99"]),
        (1.0, latency.get("max", latency["p99"])),
    ]


def draw_latencies(quantiles: list[tuple[float, float]], rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` draws from the distribution through those quantile points (piecewise linear)."""
    qs, values = zip(*quantiles, strict=True)
    values = np.maximum.accumulate(np.asarray(values, dtype=float))
    return np.interp(rng.uniform(0, 1, n), qs, values)


def simulate_quota(work_ms: np.ndarray, vcpus: float, period_ms: float = CPU_PERIOD_MS) -> np.ndarray:
    """Latencies of back-to-back inferences needing `work_ms` of one CPU each, under a CFS quota
    of `vcpus` (< 1) x `period_ms` per period: a period's budget spent, the thread waits for the
    next period."""
    quota = vcpus * period_ms
    latencies = np.empty_like(work_ms)
    now, period_end, budget = 0.0, period_ms, quota
    for i, work in enumerate(work_ms):
        start, left = now, float(work)
        while True:
            if now >= period_end:  # a new period: the budget is refilled
                period_end += math.floor((now - period_end) / period_ms + 1) * period_ms
                budget = quota
            run = min(left, budget, period_end - now)
            now, left, budget = now + run, left - run, budget - run
            if left <= 1e-9:
                break
            if budget <= 1e-9:  # throttled until the period ends
                now = period_end
        latencies[i] = now - start
    return latencies


def _throttled(latency: Latency | dict, vcpus: float, work_factor: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    work = draw_latencies(latency_quantiles(latency), rng, SIMULATED_INFERENCES) * work_factor
    lat = simulate_quota(work, vcpus)[SIMULATED_INFERENCES // 20 :]
    q = {p: float(np.percentile(lat, p)) for p in (25, 50, 75, 90, 95, 97, 99, 99.9)}
    return {
        "p50": q[50],
        "p90": q[90],
        "p95": q[95],
        "p99": q[99],
        "mean": float(lat.mean()),
        # where a percentile sits between the unstalled and the stalled inferences it can
        # land on either side: the spread around it is the honest uncertainty
        "p50_spread": (q[25], q[75]),
        "p99_spread": (q[97], q[99.9]),
    }


def _calibrate_work_factor(one: Latency | dict, vcpus: float, measured_mean: float) -> float:
    """The work factor making the simulated mean latency at `vcpus` the measured one (bisection:
    the mean grows steadily with the work; a percentile jumps between stalled and not)."""
    low, high = 0.25, 4.0
    for _ in range(30):
        mid = math.sqrt(low * high)
        if _throttled(one, vcpus, mid)["mean"] < measured_mean:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)


class NoPrediction(Exception):
    """The anchors do not allow a prediction in a regime; the message says why."""


@dataclass
class FamilyModel:
    """The fitted model of one family, built from its anchors."""

    one: Anchor
    small: Anchor | None
    two: Anchor | None
    min_fit_mb: int
    fit_reason: str
    throttled_problem: str | None = None
    threads_problem: str | None = None
    work_factor: float = 1.0
    p50_ratio_small: float = 1.0
    p99_ratio_small: float = 1.0
    cold_alpha: float = 1.0

    @classmethod
    def fit(cls, anchors: list[Anchor], out_of_memory_mb: list[int]) -> FamilyModel:
        by_size = {a.memory_mb: a for a in anchors}
        one = by_size.get(ONE_VCPU_MB)
        if one is None:
            raise NoPrediction(f"the 1-vCPU anchor ({ONE_VCPU_MB} MB) was not measured")
        if not one.usable:
            raise NoPrediction(f"the 1-vCPU anchor ({ONE_VCPU_MB} MB) was not measured as Lambda would run it")
        peak = max(a.peak_mb for a in anchors)
        min_fit = math.ceil(peak * FIT_MARGIN)
        reason = (
            f"the measured peak is {peak:.0f} MB; with a {FIT_MARGIN - 1:.0%} margin the smallest size that fits "
            f"is {min_fit} MB"
        )
        if out_of_memory_mb and max(out_of_memory_mb) + 1 > min_fit:
            min_fit = max(out_of_memory_mb) + 1
            reason = f"it ran out of memory at {max(out_of_memory_mb)} MB; the smallest size that fits is above it"
        smalls = [a for a in anchors if a.memory_mb < ONE_VCPU_MB]
        twos = [a for a in anchors if a.memory_mb == TWO_VCPU_MB]
        model = cls(
            one=one,
            small=smalls[0] if smalls else None,
            two=twos[0] if twos else None,
            min_fit_mb=min_fit,
            fit_reason=reason,
        )
        model._fit_throttled()
        model._fit_threads()
        return model

    def _noise(self, *anchors: Anchor) -> float:
        return max(NOISE, *(2 * a.rel_ci("p50") for a in anchors))

    def _fit_throttled(self) -> None:
        small = self.small
        if small is None:
            return
        if not small.usable:
            self.throttled_problem = f"the {small.memory_mb} MB anchor was not measured as Lambda would run it"
            return
        one_p50, small_p50 = self.one.latency.p50, small.latency.p50
        if small_p50 < one_p50 * (1 - self._noise(self.one, small)):
            self.throttled_problem = (
                f"measured faster with less CPU ({small_p50:.2f} ms at {small.memory_mb} MB against "
                f"{one_p50:.2f} ms at {ONE_VCPU_MB} MB): the CPU share does not explain it"
            )
            return
        vcpus = lambda_vcpus(small.memory_mb)
        self.work_factor = _calibrate_work_factor(self.one.latency, vcpus, small.latency.mean or small_p50)
        simulated = _throttled(self.one.latency, vcpus, self.work_factor)
        self.p50_ratio_small = small_p50 / simulated["p50"]
        self.p99_ratio_small = small.latency.p99 / simulated["p99"]
        one_cold, small_cold = self.one.cold_ms, small.cold_ms
        self.cold_alpha = min(1.5, max(0.0, math.log(small_cold / one_cold) / math.log(1 / vcpus)))

    def _fit_threads(self) -> None:
        two = self.two
        if two is None:
            return
        if two.result.host_limited:
            self.threads_problem = f"the {TWO_VCPU_MB} MB anchor is host-limited (this host cannot give 2 vCPUs)"
            return
        if not two.usable:
            self.threads_problem = f"the {TWO_VCPU_MB} MB anchor was not measured as Lambda would run it"
            return
        one_p50, two_p50 = self.one.latency.p50, two.latency.p50
        if two_p50 > one_p50 * (1 + self._noise(self.one, two)):
            self.threads_problem = (
                f"measured slower with 2 vCPUs than with 1 beyond noise ({two_p50:.2f} ms at {TWO_VCPU_MB} MB, "
                f"{one_p50:.2f} ms at {ONE_VCPU_MB} MB): no curve through noise"
            )

    def _interp_log(self, vcpus: float, at_small: float) -> float:
        """A calibration value, `at_small` at the small anchor's vCPUs and neutral (1) at 1 vCPU,
        interpolated in log(vCPUs); held at `at_small` below the small anchor."""
        small_vcpus = lambda_vcpus(self.small.memory_mb)
        weight = min(1.0, math.log(vcpus) / math.log(small_vcpus)) if small_vcpus < 1 else 0.0
        return math.exp(weight * math.log(at_small))

    def _amdahl(self, stat: str, threads: int) -> float:
        t1, t2 = self.one.stat(stat), self.two.stat(stat)
        serial, parallel = max(0.0, 2 * t2 - t1), t1 - max(0.0, 2 * t2 - t1)  # T(n) = A + B/n, T(1)=t1, T(2)=t2
        return serial + parallel / threads

    def predict(self, memory_mb: int) -> dict:
        """The predicted latency, cold start and interval at `memory_mb`, or `NoPrediction`."""
        vcpus, threads = lambda_vcpus(memory_mb), lambda_threads(memory_mb)
        one = self.one
        anchors = [one]
        spreads = {}
        if vcpus < 1:
            if self.throttled_problem:
                raise NoPrediction(self.throttled_problem)
            calibrated = self.small is not None and self.small.usable
            if calibrated:
                regime = "throttled_below" if memory_mb < self.small.memory_mb else "throttled"
                factor = self._interp_log(vcpus, self.work_factor)
                r50, r99 = self._interp_log(vcpus, self.p50_ratio_small), self._interp_log(vcpus, self.p99_ratio_small)
                anchors.append(self.small)
                basis = (
                    f"1 thread throttled to {vcpus:.2f} vCPU: the {ONE_VCPU_MB} MB distribution run through the CPU "
                    f"quota, calibrated at {self.small.memory_mb} MB"
                )
            else:  # no size below 1 vCPU ran (out of memory, or not measured): the quota alone
                regime, factor, r50, r99 = "throttled_uncalibrated", 1.0, 1.0, 1.0
                basis = (
                    f"1 thread throttled to {vcpus:.2f} vCPU: the {ONE_VCPU_MB} MB distribution run through the CPU "
                    "quota, uncalibrated"
                )
            simulated = _throttled(one.latency, vcpus, factor)
            p50 = simulated["p50"] * r50
            p99 = max(p50, simulated["p99"] * r99)
            latency = {
                "p50": p50,
                "p90": min(p99, max(p50, simulated["p90"])),
                "p95": min(p99, max(p50, simulated["p95"])),
                "p99": p99,
                "mean": max(p50, simulated["mean"]),
            }
            spreads = {
                "p50": [v * r50 for v in simulated["p50_spread"]],
                "p99": [v * r99 for v in simulated["p99_spread"]],
            }
            alpha = self.cold_alpha if calibrated else 1.0
            cold = one.cold_ms * (1 / vcpus) ** alpha
        elif threads == 1:
            regime = "same_threads"
            latency = {k: one.stat(k) for k in ("p50", "p90", "p95", "p99", "mean") if one.stat(k) is not None}
            cold = one.cold_ms
            basis = f"1 thread, never throttled: as at {ONE_VCPU_MB} MB"
        else:
            if self.two is None:
                raise NoPrediction(f"the {TWO_VCPU_MB} MB anchor was not measured")
            if self.threads_problem:
                raise NoPrediction(self.threads_problem)
            regime = "threads" if threads == 2 else "threads_beyond"
            stats = [k for k in ("p50", "p90", "p95", "p99", "mean") if None not in (one.stat(k), self.two.stat(k))]
            latency = {k: self._amdahl(k, threads) for k in stats}
            cold_one, cold_two = one.cold_ms, self.two.cold_ms
            cold = max(0.0, 2 * cold_two - cold_one) + (cold_one - max(0.0, 2 * cold_two - cold_one)) / threads
            anchors.append(self.two)
            basis = (
                f"{threads} threads: T(n) = A + B/n through {ONE_VCPU_MB} MB (1 thread) and {TWO_VCPU_MB} MB "
                "(2 threads)"
            )
        model_error = MODEL_ERROR[regime] * (threads - 2 if regime == "threads_beyond" else 1)
        e50 = math.hypot(model_error, max(a.rel_ci("p50") for a in anchors))
        e99 = math.hypot(P99_ERROR_FACTOR * model_error, max(a.rel_ci("p99") for a in anchors))
        interval = {
            "p50": [latency["p50"] * (1 - e50), latency["p50"] * (1 + e50)],
            "p99": [latency["p99"] * (1 - min(0.9, e99)), latency["p99"] * (1 + e99)],
        }
        for stat, (low, high) in spreads.items():  # a percentile on the edge between stalled and not: either side
            interval[stat] = [min(interval[stat][0], low), max(interval[stat][1], high)]
        return {
            "latency": latency,
            "cold_start_ms": cold,
            "threads": threads,
            "vcpus": vcpus,
            "regime": regime,
            "beyond_measured_range": regime in ("throttled_below", "throttled_uncalibrated", "threads_beyond"),
            "basis": basis,
            "anchors": [a.memory_mb for a in anchors],
            "interval": {
                "level": "about 95 %",
                **interval,
                "cold_start_ms": [cold * (1 - COLD_START_ERROR), cold * (1 + COLD_START_ERROR)],
            },
        }


def _family(combo: Combo) -> tuple:
    return (combo.hardware, combo.optimizer, combo.batch_size)


def predict_run(
    request: RequestSubmitted,
    predicted: list[Combo],
    results: list[SummaryResult],
    failures: list[FailedCombination],
    region: str,
) -> tuple[list[SummaryResult], list[FailedCombination]]:
    """Rows for the `predicted` combinations from the run's measured `results` (and the
    `failures` of its anchors): (predicted rows, combinations that will not fit or get no
    prediction, each failed at the stage `prediction` with the reason, and `smallest_fit_mb`
    when it will not fit). A family whose measured sizes were all skipped (they cannot change the
    answer: TVM's tuning) has its predicted sizes skipped too, with the same reason."""
    anchors: dict[tuple, list[Anchor]] = {}
    for result in results:
        if not result.predicted:
            anchors.setdefault(_family(result.combo), []).append(Anchor(result.combo.memory_mb, result))
    oom: dict[tuple, list[int]] = {}
    skipped: dict[tuple, str] = {}  # families not measured because they cannot change the answer (TVM's tuning)
    for failure in failures:
        if "out of memory" in (failure.reason or ""):
            oom.setdefault(_family(failure.combo), []).append(failure.combo.memory_mb)
        if failure.stage == FailureStage.skipped:
            skipped[_family(failure.combo)] = failure.reason
    models: dict[tuple, FamilyModel | str] = {}
    rows, refused = [], []
    for combo in predicted:
        family = _family(combo)
        if family in skipped and family not in anchors:  # its measured sizes were skipped: so is this one
            key = combo_key(request.model, combo, request.tuning)
            refused.append(_refused(key, combo, skipped[family], stage=FailureStage.skipped))
            continue
        if family not in models:
            try:
                models[family] = FamilyModel.fit(anchors.get(family, []), oom.get(family, []))
            except NoPrediction as exc:
                models[family] = str(exc)
        model = models[family]
        key = combo_key(request.model, combo, request.tuning)
        if isinstance(model, str):
            refused.append(_refused(key, combo, f"no prediction: {model}"))
            continue
        if combo.memory_mb < model.min_fit_mb:
            refused.append(_refused(key, combo, f"will not fit: {model.fit_reason}", smallest_fit_mb=model.min_fit_mb))
            continue
        try:
            guess = model.predict(combo.memory_mb)
        except NoPrediction as exc:
            refused.append(_refused(key, combo, f"no prediction: {exc}"))
            continue
        rows.append(_row(request, combo, key, model, guess, region))
    return rows, refused


def _refused(
    key: str, combo: Combo, reason: str, stage: FailureStage = FailureStage.prediction, **more
) -> FailedCombination:
    return FailedCombination(combo_key=key, combo=combo, label=combo.label, stage=stage, reason=reason, **more)


def _row(
    request: RequestSubmitted, combo: Combo, key: str, model: FamilyModel, guess: dict, region: str
) -> SummaryResult:
    one = model.one.result
    latency = dict(guess["latency"])
    billed = math.ceil(latency["mean"]) if latency["mean"] >= 1 else 1.0
    try:
        cost = cost_block(
            billed_ms_per_request=float(billed),
            cold_start_ms=guess["cold_start_ms"],
            memory_mb=combo.memory_mb,
            batch_size=combo.batch_size,
            hardware=combo.hardware,
            region=region,
        )
    except UnknownPriceRegion:
        cost = None
    return SummaryResult(
        combo_key=key,
        combo=combo.model_dump(mode="json"),  # every field set: the row is stored as it was built
        model=request.model.model_dump(mode="json"),
        predicted=True,
        prediction=Prediction(**{k: guess[k] for k in ("regime", "beyond_measured_range", "basis", "anchors")}),
        interval=Interval.model_validate(guess["interval"]),
        latency_ms=Latency.model_validate({**latency, "billed_ms_mean": float(billed)}),
        cold_start_ms=ColdStartTotal(total=guess["cold_start_ms"]),
        peak_rss_mb=model.one.peak_mb,
        smallest_fit_mb=model.min_fit_mb,
        agreement=one.agreement,  # the same artifact on the same inputs: memory does not change the answers
        emulated=one.emulated,
        threads=guess["threads"],
        vcpus=guess["vcpus"],
        cost=cost,
        reused=False,
    )
