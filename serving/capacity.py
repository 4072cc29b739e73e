"""`ayci capacity`: the highest request rate a served combination takes with its p99 within an SLO
(perf_analyzer's request-rate sweep with a latency limit; MLPerf Server's peak search).

The rate is stepped from `start_rps`: doubled while a level stays within the SLO, then bisected
between the highest rate within it and the lowest above it that broke it, until the two are
within `precision` of each other (`next_rate`, a pure function of the levels so far). A level
breaks the SLO when its p99 is above it or any request failed (refused 503s of a full queue,
timeouts, connection errors: an error share above `max_error_share`). A failure at a rate below a
pass counts: the capacity is the highest rate within the SLO below every rate that broke it.

Each level is open-loop arrivals (`serving/open_loop.py`: each request at its scheduled time,
latency from that time) at the level's rate for `warmup_s + duration_s`; the first `warmup_s`
(workers the level scales out to starting) are sent but not counted. Per level: p50, p90, p95,
p99, throughput (answers per second), errors, and the time a request waited in the model's
queue against the time its worker computed (the endpoint's `X-Queued-Ms` and `X-Inference-Ms`),
the rest being HTTP and (de)serialization.

Beside each level, the traffic simulation (`core.lambda_model.traffic.simulate`) of the same
arrivals served by a pool of the endpoint's size (its first worker warm, as the endpoint's is),
fed what the load test's calibration (`serving.loadtest.calibrate`) measured on this machine just
before the levels: the service time, the cold start and the per-request overhead (HTTP, the body's
decoding, the answer's encoding: drawn per request, outside the pool). That is the simulated curve
and the simulated capacity (the same stepping run on the simulation). The simulation fed the run's
stored measurement instead (its latency distribution and cold start, with the same overhead) gives
a second simulated capacity: how far this machine, now, is from the measurement.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import structlog

log = structlog.get_logger()

MIN_LEVEL_REQUESTS = 100  # a level's p99 on fewer is about its maximum: the level is made longer
MAX_LEVEL_S = 120.0  # ... but never longer than this
DEFAULT_PRECISION = 0.10  # stop when the highest rate within and the lowest above are within 10 %
DEFAULT_MAX_LEVELS = 12
DEFAULT_MAX_RPS = 500.0  # what one open-loop generator process sends on a small machine


@dataclass(frozen=True)
class Stepping:
    """How the rate is stepped: from `start_rps`, doubled up to `max_rps`, bisected down to
    `precision`, at most `max_levels` levels, never below `min_rps` (default `start_rps` / 16)."""

    start_rps: float
    max_rps: float = DEFAULT_MAX_RPS
    precision: float = DEFAULT_PRECISION
    max_levels: int = DEFAULT_MAX_LEVELS
    min_rps: float | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_rps) and self.start_rps > 0):
            raise ValueError(f"start rate: above 0 req/s, got {self.start_rps!r}")
        if not (math.isfinite(self.max_rps) and self.max_rps >= self.start_rps):
            raise ValueError(f"max rate: at least the start rate ({self.start_rps:g}), got {self.max_rps!r}")
        if not 0 < self.precision < 1:
            raise ValueError(f"precision: between 0 and 1, got {self.precision!r}")
        if self.max_levels < 1:
            raise ValueError(f"max levels: at least 1, got {self.max_levels!r}")

    @property
    def floor_rps(self) -> float:
        return self.min_rps if self.min_rps is not None else self.start_rps / 16


def bracket(levels: Sequence[tuple[float, bool]]) -> tuple[float | None, float | None]:
    """(the highest rate within the SLO below every rate that broke it, the lowest rate that
    broke it), each None when there is none. `levels`: (rate, within the SLO) in any order."""
    broke = min((rps for rps, within in levels if not within), default=None)
    passed = [rps for rps, within in levels if within and (broke is None or rps < broke)]
    return max(passed, default=None), broke


def capacity_of(levels: Sequence[tuple[float, bool]]) -> float | None:
    """The highest rate within the SLO (below every rate that broke it), None if none was."""
    return bracket(levels)[0]


def next_rate(levels: Sequence[tuple[float, bool]], stepping: Stepping) -> float | None:
    """The next level's rate from the levels so far ((rate, within the SLO), in the order run),
    or None when the search is done: doubling while every level is within the SLO (up to
    `max_rps`, done once `max_rps` is), then bisecting the bracket until its ends are within
    `precision`; halving below the first rate when even that broke it (done below `min_rps`)."""
    if not levels:
        return stepping.start_rps
    if len(levels) >= stepping.max_levels:
        return None
    within, broke = bracket(levels)
    if broke is None:  # nothing broke it yet: double
        assert within is not None
        return None if within >= stepping.max_rps else min(2 * within, stepping.max_rps)
    if within is None:  # even the lowest rate tried broke it: halve
        lower = broke / 2
        return None if lower < stepping.floor_rps else lower
    if broke <= within * (1 + stepping.precision):
        return None
    return (within + broke) / 2


def search(measure: Callable[[float], bool], stepping: Stepping) -> list[tuple[float, bool]]:
    """Run `measure(rate) -> within the SLO` at each rate `next_rate` names; the levels run."""
    levels: list[tuple[float, bool]] = []
    while (rate := next_rate(levels, stepping)) is not None:
        levels.append((rate, measure(rate)))
    return levels


# --- one level's figures
@dataclass
class LevelFigures:
    """What one level measured (or simulated), over the requests after its warm-up."""

    rps: float  # offered: the schedule's rate
    requests: int  # counted (scheduled after the warm-up)
    answered: int
    errors: dict[str, int]
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    throughput_rps: float  # answers per second over the counted window
    queued_ms: float | None = None  # mean time in the model's queue (the endpoint's X-Queued-Ms)
    computing_ms: float | None = None  # mean time the worker computed (X-Inference-Ms)
    other_ms: float | None = None  # the rest: HTTP, (de)serialization, the generator's own lag
    queued_p99_ms: float | None = None
    send_lag_p99_ms: float | None = None  # how late the generator itself sent (part of the latency)
    within_slo: bool = False
    duration_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())


def percentiles(latencies_ms: Sequence[float]) -> tuple[float, float, float, float]:
    """(p50, p90, p95, p99) in ms; NaN each when there is none."""
    if not len(latencies_ms):
        return (math.nan,) * 4
    return tuple(float(v) for v in np.percentile(np.asarray(latencies_ms, dtype=float), [50, 90, 95, 99]))


def level_figures(
    timings: Sequence, rps: float, warmup_s: float, duration_s: float, slo_ms: float, max_error_share: float
) -> LevelFigures:
    """A level's figures from the open-loop generator's `RequestTiming`s: the ones scheduled after
    `warmup_s`; the latency of an answer from its scheduled time; an error is any non-200."""
    counted = [t for t in timings if t.scheduled_s >= warmup_s]
    answered = [t for t in counted if t.ok]
    errors: dict[str, int] = {}
    for t in counted:
        if not t.ok:
            key = str(t.status) if t.status else (t.error or "no answer").split(":")[0]
            errors[key] = errors.get(key, 0) + 1
    p50, p90, p95, p99 = percentiles([t.latency_ms for t in answered])
    if answered:
        span = max(t.finished_s for t in answered) - min(t.scheduled_s for t in counted)
        throughput = len(answered) / max(span, duration_s, 1e-9)
    else:
        throughput = 0.0
    split = [t for t in answered if t.queued_ms is not None and t.compute_ms is not None]
    queued = [t.queued_ms for t in split]
    computing = [t.compute_ms for t in split]
    other = [t.overhead_ms for t in split]
    error_share = (len(counted) - len(answered)) / len(counted) if counted else 1.0
    notes = []
    if len(answered) < MIN_LEVEL_REQUESTS:
        notes.append(f"p99 an estimate ({len(answered)} answers)")
    return LevelFigures(
        rps=rps,
        requests=len(counted),
        answered=len(answered),
        errors=errors,
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        throughput_rps=throughput,
        queued_ms=float(np.mean(queued)) if queued else None,
        computing_ms=float(np.mean(computing)) if computing else None,
        other_ms=float(np.mean(other)) if other else None,
        queued_p99_ms=float(np.percentile(queued, 99)) if queued else None,
        send_lag_p99_ms=float(np.percentile([t.send_lag_ms for t in counted], 99)) if counted else None,
        within_slo=bool(counted) and error_share <= max_error_share and p99 <= slo_ms,
        duration_s=duration_s,
        notes=notes,
    )


def level_duration(rps: float, duration_s: float) -> float:
    """A level's counted length: `duration_s`, longer when that holds fewer than
    `MIN_LEVEL_REQUESTS` requests at `rps` (at most `MAX_LEVEL_S`)."""
    return min(max(duration_s, MIN_LEVEL_REQUESTS / rps), max(MAX_LEVEL_S, duration_s))


# --- the simulation beside it
@dataclass(frozen=True)
class PoolModel:
    """What the simulation is fed: the warm service time's quantiles and the cold start (ms), the
    endpoint's pool (workers at most, idle time) and the per-request overhead outside the pool:
    drawn from `overhead_samples_ms` when given, else the constant `overhead_ms`."""

    warm_quantiles: list[tuple[float, float]]
    cold_ms: float
    max_workers: int
    idle_s: float
    overhead_ms: float = 0.0
    overhead_samples_ms: tuple[float, ...] = ()

    def overhead(self, rng: np.random.Generator, n: int) -> np.ndarray | float:
        if self.overhead_samples_ms:
            return rng.choice(np.asarray(self.overhead_samples_ms, dtype=float), n)
        return self.overhead_ms

    @classmethod
    def calibrated(cls, calibration: dict, max_workers: int, idle_s: float) -> PoolModel:
        """Fed a model's calibration (`serving.loadtest.calibrate`: service, cold start and
        overhead samples, ms): its service times every percent, its cold start to ready plus a
        request's service."""
        from serving.loadtest import quantile_at, service_quantiles

        warm = service_quantiles(calibration["service_ms"])
        return cls(
            warm_quantiles=warm,
            cold_ms=float(np.median(calibration["cold_start_ms"])) + quantile_at(warm, 0.5),
            max_workers=max_workers,
            idle_s=idle_s,
            overhead_samples_ms=tuple(float(v) for v in calibration["overhead_ms"]),
        )

    def summary(self) -> dict:
        overhead = np.asarray(self.overhead_samples_ms or [self.overhead_ms], dtype=float)
        return {
            "service_p50_ms": float(np.interp(0.5, *zip(*self.warm_quantiles, strict=True))),
            "service_p99_ms": float(np.interp(0.99, *zip(*self.warm_quantiles, strict=True))),
            "cold_start_ms": self.cold_ms,
            "overhead_p50_ms": float(np.median(overhead)),
            "overhead_p99_ms": float(np.percentile(overhead, 99)),
            "max_workers": self.max_workers,
            "idle_s": self.idle_s,
        }


def simulated_level(
    model: PoolModel,
    arrivals_s: Sequence[float],
    rps: float,
    warmup_s: float,
    duration_s: float,
    slo_ms: float,
    seed: int,
) -> LevelFigures:
    """The traffic simulation of the same arrivals served by the endpoint's pool: a request that
    finds no idle worker at the cap waits for the first to free (`max_instances`)."""
    from core.lambda_model.traffic import simulate

    times = np.asarray(arrivals_s, dtype=float)
    if not len(times):
        return LevelFigures(rps, 0, 0, {}, *(math.nan,) * 4, 0.0, within_slo=False, duration_s=duration_s)
    prior = -(model.cold_ms / 1000 + 1.0)  # the warm-up request that loaded the endpoint's first worker
    pool = simulate(
        np.concatenate([[prior], times]),
        model.warm_quantiles,
        model.cold_ms,
        model.idle_s,
        np.random.default_rng(seed),
        float(times[-1]) + 1e-3,
        max_instances=model.max_workers,
    )
    served = pool.latencies_ms[1:]  # shorter than the arrivals if the simulation's time bound stopped it
    counted = times[: len(served)] >= warmup_s
    latencies = served[counted] + model.overhead(np.random.default_rng(seed + 1), int(counted.sum()))
    p50, p90, p95, p99 = percentiles(latencies)
    finished = times[: len(served)][counted] + latencies / 1000
    span = (float(finished.max()) - warmup_s) if len(finished) else duration_s
    return LevelFigures(
        rps=rps,
        requests=int(counted.sum()),
        answered=int(counted.sum()),
        errors={},
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        throughput_rps=int(counted.sum()) / max(span, duration_s, 1e-9),
        within_slo=bool(counted.any()) and p99 <= slo_ms,
        duration_s=duration_s,
        notes=list(pool.notes),
    )


def simulated_capacity(
    model: PoolModel, stepping: Stepping, warmup_s: float, duration_s: float, slo_ms: float, pattern: str
) -> tuple[float | None, list[LevelFigures]]:
    """The same stepping run on the simulation alone: its capacity and its levels' figures."""
    from serving.open_loop import schedule

    figures: list[LevelFigures] = []

    def within(rps: float) -> bool:
        length = level_duration(rps, duration_s)
        arrivals = schedule(pattern, rps, warmup_s + length, seed=_seed(rps))
        figures.append(simulated_level(model, arrivals, rps, warmup_s, length, slo_ms, seed=_seed(rps)))
        return figures[-1].within_slo

    return capacity_of(search(within, stepping)), figures


def _seed(rps: float) -> int:
    return int(rps * 1000) % (2**31)


# --- running it against an endpoint
@dataclass(frozen=True)
class CapacityPlan:
    slo_ms: float
    stepping: Stepping
    duration_s: float = 20.0  # counted, per level (longer at low rates: `level_duration`)
    warmup_s: float = 3.0  # per level, sent and not counted
    pattern: str = "steady"
    max_error_share: float = 0.0  # any error breaks the SLO
    timeout_s: float | None = None  # a request's, default max(10 s, 20 x the SLO)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.slo_ms) and self.slo_ms > 0):
            raise ValueError(f"SLO: a p99 above 0 ms, got {self.slo_ms!r}")
        if not (math.isfinite(self.duration_s) and 1 <= self.duration_s <= 3600):
            raise ValueError(f"level duration: from 1 s to an hour, got {self.duration_s!r}")
        if not (math.isfinite(self.warmup_s) and 0 <= self.warmup_s <= 600):
            raise ValueError(f"warm-up: from 0 s to 10 min, got {self.warmup_s!r}")
        if not 0 <= self.max_error_share < 1:
            raise ValueError(f"error share: from 0 to below 1, got {self.max_error_share!r}")

    @property
    def request_timeout_s(self) -> float:
        return self.timeout_s or max(10.0, 20 * self.slo_ms / 1000)


def default_start_rps(p50_ms: float, workers: int) -> float:
    """A first rate well within what the pool can take: a quarter of `workers` answering back to
    back at the measured p50, rounded down to 1, 2 or 5 x a power of ten (at least 0.5 req/s)."""
    rate = max(0.5, 0.25 * workers * 1000 / max(p50_ms, 1e-3))
    power = 10 ** math.floor(math.log10(rate))
    return max(0.5, max(m * power for m in (1, 2, 5) if m * power <= rate))


def request_body(model) -> bytes:
    """The run's own reference inputs as a binary `.npz` body (what the load test sends)."""
    from serving.wire import pack

    with np.load(model.reference_path, allow_pickle=False) as reference:
        inputs = {k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}
    return pack(inputs)


def run_capacity(
    endpoint, app, name: str, plan: CapacityPlan, out_dir: Path, on_level: Callable[[dict], None] | None = None
) -> dict:
    """Calibrate (`serving.loadtest.calibrate`), then step the rate against `name` on `endpoint`
    (started; `app` its HTTP app, served here on a loopback port) by `plan`; the report (also
    `out_dir/report.json`), with `capacity.csv` (one row per level, measured and simulated),
    `requests.csv` and `capacity.png`. `on_level` is called with each level's row as it is measured
    (its `measured` figures; `simulated` is added once every level is run)."""
    from core import measurement_lock
    from core.lambda_model.prediction import latency_quantiles
    from serving.app import ServerThread
    from serving.loadtest import calibrate
    from serving.open_loop import Outgoing, drive, schedule

    out_dir.mkdir(parents=True, exist_ok=True)
    model = endpoint.models[name]
    payload = request_body(model)
    body = Outgoing(path=f"/invocations/{name}", body=payload, label=name)
    result = model.result.model_dump(mode="json", exclude_unset=True)
    rows: list[dict] = []
    request_rows: list[dict] = []
    sent: list[list[float]] = []  # each level's arrivals, for the simulation after
    # a measurement of this machine: AYCI's own measurements wait for the machine's lock instead of running beside it
    with ServerThread(app) as url, measurement_lock.exclusive() as lock_wait_s:
        calibration = calibrate(endpoint, url, {name: payload})[name]
        _, warm = drive(url, [0.0], [body], timeout_s=max(plan.request_timeout_s, 300.0))  # a worker, loaded
        warm_up = {"status": warm[0].status, "latency_ms": warm[0].latency_ms} if warm else {}

        def measure(rps: float) -> bool:
            level = len(rows)
            length = level_duration(rps, plan.duration_s)
            arrivals = schedule(plan.pattern, rps, plan.warmup_s + length, seed=_seed(rps))
            _, timings = drive(url, arrivals, [body] * len(arrivals), timeout_s=plan.request_timeout_s)
            seen = level_figures(timings, rps, plan.warmup_s, length, plan.slo_ms, plan.max_error_share)
            request_rows.extend({"level": level, "rps": rps, **t.row()} for t in timings)
            sent.append(arrivals)
            row = {"level": level, "measured": asdict(seen)}
            rows.append(row)
            log.info("capacity_level", rps=rps, p99_ms=round(seen.p99_ms, 2), within=seen.within_slo)
            if on_level:
                on_level(row)
            return seen.within_slo

        levels = search(measure, plan.stepping)
    workers, idle_s = endpoint.policy.max_workers, endpoint.policy.idle_s
    fed = PoolModel.calibrated(calibration, workers, idle_s)
    from_run = PoolModel(
        warm_quantiles=latency_quantiles(result["latency_ms"]),
        cold_ms=(result.get("cold_start_ms") or {}).get("total") or 0.0,
        max_workers=workers,
        idle_s=idle_s,
        overhead_samples_ms=fed.overhead_samples_ms,
    )
    for row, arrivals in zip(rows, sent, strict=True):
        rps, length = row["measured"]["rps"], row["measured"]["duration_s"]
        row["simulated"] = asdict(
            simulated_level(fed, arrivals, rps, plan.warmup_s, length, plan.slo_ms, seed=_seed(rps))
        )
    searched = (plan.stepping, plan.warmup_s, plan.duration_s, plan.slo_ms, plan.pattern)
    sim_capacity, sim_levels = simulated_capacity(fed, *searched)
    run_capacity_rps, _ = simulated_capacity(from_run, *searched)
    report = {
        "run_id": model.run_id,
        "combination": model.label,
        "model": name,
        "plan": {**asdict(plan), "stepping": asdict(plan.stepping)},
        "endpoint": {
            "max_workers": workers,
            "idle_s": idle_s,
            "max_queue": endpoint.max_queue,
            "lambda_like": getattr(endpoint.policy, "lambda_like", False),
        },
        "calibration": calibration.get("summary", {}),
        "lock_wait_s": lock_wait_s,  # waiting for the machine's measurement lock (others' measurements)
        "fed": fed.summary(),
        "warm_up": warm_up,
        "overhead_ms": fed.summary()["overhead_p50_ms"],
        "levels": rows,
        "capacity_rps": capacity_of(levels),
        "bracket": list(bracket(levels)),
        "simulated_capacity_rps": sim_capacity,
        "simulated_levels": [asdict(level) for level in sim_levels],
        "simulated_from_run_capacity_rps": run_capacity_rps,
        "from_run": from_run.summary() | {"measured": {k: result["latency_ms"].get(k) for k in ("p50", "p95", "p99")}},
        "files": {
            "csv": str(out_dir / "capacity.csv"),
            "requests": str(out_dir / "requests.csv"),
            "plot": str(out_dir / "capacity.png"),
            "report": str(out_dir / "report.json"),
        },
    }
    write_levels_csv(rows, out_dir / "capacity.csv")
    _write_requests(request_rows, out_dir / "requests.csv")
    plot(report, out_dir / "capacity.png")
    (out_dir / "report.json").write_text(json.dumps(report, indent=1, default=str))
    return report


CSV_FIGURES = (
    "requests",
    "answered",
    "errors",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "throughput_rps",
    "queued_ms",
    "computing_ms",
    "other_ms",
    "within_slo",
)


def write_levels_csv(rows: list[dict], path: Path) -> None:
    """One line per level, in the order run: the offered rate, the measured figures, the simulated ones."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["level", "rps", *CSV_FIGURES, *(f"simulated_{k}" for k in CSV_FIGURES if k not in ("errors",))]
        )
        for row in rows:
            seen, sim = row["measured"], row["simulated"]
            writer.writerow(
                [
                    row["level"],
                    seen["rps"],
                    *(sum(seen[k].values()) if k == "errors" else _cell(seen[k]) for k in CSV_FIGURES),
                    *(_cell(sim[k]) for k in CSV_FIGURES if k != "errors"),
                ]
            )


def _cell(value):
    return "" if value is None else value


def _write_requests(rows: list[dict], path: Path) -> None:
    if not rows:
        path.write_text("")
        return
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot(report: dict, path: Path) -> None:
    """p50, p95 and p99 against the offered rate (log-log), measured beside simulated (at the
    measured rates and at the simulation's own search, so its curve reaches its capacity), the SLO
    and both capacities; below, answers per second against the offered rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    rows = sorted(report["levels"], key=lambda r: r["measured"]["rps"])
    measured = [r["measured"] for r in rows]
    simulated = {r["simulated"]["rps"]: r["simulated"] for r in rows if r.get("simulated")}
    simulated |= {level["rps"]: level for level in report.get("simulated_levels") or []}
    curves = (
        ("measured", measured, dict(marker="o", linestyle="-")),
        ("simulated", [simulated[k] for k in sorted(simulated)], dict(marker="s", linestyle="--", alpha=0.6)),
    )
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 7.5), height_ratios=[3, 2])
    for side, levels, style in curves:
        rates = [level["rps"] for level in levels]
        for stat, color in (("p50_ms", "tab:blue"), ("p95_ms", "tab:green"), ("p99_ms", "tab:red")):
            top.plot(rates, [level[stat] for level in levels], color=color, label=f"{stat[:3]} {side}", **style)
        bottom.plot(rates, [level["throughput_rps"] for level in levels], label=f"answers/s {side}", **style)
    broke = [level for level in measured if not level["within_slo"]]
    if broke:
        top.scatter(
            [level["rps"] for level in broke],
            [level["p99_ms"] for level in broke],
            s=90,
            facecolors="none",
            edgecolors="black",
            label="measured, broke the SLO",
        )
    slo = report["plan"]["slo_ms"]
    top.axhline(slo, color="black", linewidth=1, label=f"SLO: p99 {slo:g} ms")
    for value, label, color in (
        (report["capacity_rps"], "capacity measured", "black"),
        (report["simulated_capacity_rps"], "capacity simulated", "tab:gray"),
    ):
        if value:
            for axis in (top, bottom):
                axis.axvline(value, color=color, linestyle=":", linewidth=1.2, label=f"{label} {value:.3g} req/s")
    all_rates = [level["rps"] for level in measured] + list(simulated)
    bottom.plot(sorted(all_rates), sorted(all_rates), color="black", linewidth=0.6, alpha=0.5, label="offered")
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # 20, not 2 x 10^1
    for axis in (top, bottom):
        axis.set_xscale("log")
        axis.set_yscale("log")
        for ticks in (axis.xaxis, axis.yaxis):
            ticks.set_major_formatter(plain)
            ticks.set_minor_formatter(plain)
        axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    top.set_ylabel("latency (ms), from the scheduled time")
    top.set_title(f"ayci capacity: {report['combination']} of run {report['run_id'][:8]}")
    bottom.set_ylabel("answers per second")
    bottom.set_xlabel("offered rate (req/s, open-loop arrivals)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
