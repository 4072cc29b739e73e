"""`ayci loadtest`: the endpoint driven by open-loop arrivals, held against the traffic simulation
of the same arrivals, fed what this machine measured.

The endpoint runs in this process (`app.ServerThread`, loopback only); the load comes from
`open_loop.drive` in a child process of its own: each request at its scheduled time (steady:
Poisson at `rps`; spiky: bursts of `BURST_MULTIPLIER` x `rps`, one in the middle of each half, a
sixth of the half long; or a CSV file of arrival times), its latency counted from that time.

Before the load, a calibration measures what the simulation is fed (`calibrate`), on this machine,
now, at a low rate: the service time (what holds a warm worker per request: the hand-over to its
feeding thread, `X-Queued-Ms` of a request that found it idle, and its round trip,
`X-Inference-Ms`), the per-request overhead (each calibration request's latency beyond its time
queued and in the worker: HTTP, the body's decoding, the answer's encoding, the hops between threads; the
echo path `POST /echo/{model}`, which does all but the inference, is timed beside it as a check)
and the cold start (real worker processes started one after the other, each timed from its start
to ready: sandbox, imports, load, first inference). The pools are then emptied, and the load
starts on an endpoint with no worker, as the simulation's pool does. The calibration and the load
hold the machine's measurement lock (`core.measurement_lock.exclusive`; the wait is reported): AYCI's
own measurements wait instead of running beside them.

What the simulation is fed comes from the load itself where it measured enough (`load_fed`): the
service time each warm request got in its worker (`X-Inference-Ms`, read from its answer) plus the
calibration's hand-over to the worker's thread (a shared host moved the calibration's service p50
from 3.3 to 6.5 ms between runs); the overhead of each answered invocation (its latency beyond its
time queued and in the worker); and, for a Lambda-like pool, the cold starts its requests waited for
(the calibration's are timed one at a time on an idle pool: the pool's under the load took 0.8-1.3
times them, p50, and two started together up to 1.5 times). Each simulated arrival's service and overhead
are drawn together from a warm request among the `NEAREST` nearest to it in time (`nearest_draws`):
the host slowed down with its own load (a spiky pattern's bursts), and drawn from the whole test the
bursts' slow requests landed anywhere. Echo probes (`PROBE_SHARE` of the requests,
following the load's rate: `probe_times`; the echo path: the whole front end, no worker) are a check
reported beside (`observed.echo`): their tail was up to 1.9 times the invocations' own overhead's, which
they were fed before. The calibration's figures are the fallback when the load answered too few.
This feeding is the load test's check only (the product's traffic answer is fed the run's
measurement); what the simulation predicts from these inputs, and what is judged, is the pool:
queueing, cold starts and their share, reuse and reclaim. Each row says which `regime` its p99 is
in (warm tail, cold starts, or the edge between them, where a few cold starts more or less move it), and
how many requests keep its p99 on one side of those that waited for a cold start (`p99_determined_requests`):
near a 1 % share, 2,000 do not.

The arrivals the simulation serves are the times the requests entered the pool (`X-Pool-Entered-At`,
this host's monotonic clock), each request's time before it (the generator's lag, HTTP, the body's
decoding, the front end taking requests in turn) added to its own simulated latency: two requests sent
together reached the pool one after the other, so a second worker was started less often than for the
schedule's arrivals (at idle 2 s, steady 20 req/s: 5 cold starts against 11 simulated on the schedule).

The prediction: `core.lambda_model.traffic.simulate` on the very arrivals of each model,
the service time and cold starts fed, the endpoint's idle time as the idle timeout and its workers
as the concurrency limit, cold starts drawn from the measured ones (`cold_samples_ms`), and the
measured overhead added to each simulated latency (`overhead_ms`, drawn from the samples: an
explicit parameter of `simulate`, holding no instance). The simulation models a Lambda pool,
which `--lambda-like` makes the endpoint (`scaling.ScalingPolicy.lambda_like`); the default
endpoint (one worker kept, scale-out on the scaler's ticks) is compared too, but is not that model.

The comparison (`compare`) passes or fails, with both figures: p50 and p99 within `TOLERANCE`
(15 %) of the prediction, the cold-start share within `COLD_TOLERANCE` (25 %) relative, or within
`COLD_ABS` (0.5 points) when the predicted share is under `COLD_ABS_BELOW` (2 %). The simulation
fed the run's stored measurement instead (`from_run`) is shown beside it, not judged: it says how
far this machine, now, is from the machine and moment of the measurement.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import structlog

from core import measurement_lock
from core.lambda_model.prediction import latency_quantiles
from core.lambda_model.traffic import simulate
from serving.open_loop import PATTERNS, Outgoing, RequestTiming, drive, rate_at, schedule

log = structlog.get_logger()

TOLERANCE = 0.15  # p50, p99: relative
COLD_TOLERANCE = 0.25  # the cold-start share: relative
COLD_ABS_BELOW = 0.02  # a predicted share under this is judged in points
COLD_ABS = 0.005
SAMPLE_S = 0.25
MAX_RPS = 500.0  # what the generator and the endpoint can do together on a small machine
MAX_DURATION_S = 3600.0
CALIBRATION_REQUESTS = 150  # per model, for the overhead and for the service time each
CALIBRATION_RPS = 40.0  # low enough that a warm worker is idle at each arrival
CALIBRATION_COLD_STARTS = 5
PROBE_SHARE = 0.1  # echo probes during the load, per request sent: the overhead the simulation is fed
MIN_PROBES = 20  # fewer (a short test): the calibration's overhead is fed instead
PERCENTILES = (50, 90, 95, 99)
MAX_QUANTILE_POINTS = 5000
NEAREST = 40  # a simulated arrival's service and overhead are drawn from the load's this many requests nearest in time
MIN_COLD_FED = 2  # cold starts of the load itself fed to the simulation from this many (fewer: the calibration's)
# the regime a row's p99 is in, by the simulation's share of requests that waited for a cold start (their
# latency at least half the cold start fed): "warm tail" at most 0.5 % (the p99 among warm requests, queueing
# included), "cold starts" at least 2 % (the p99 among the requests that waited for a start), between them
# "edge": there a few cold starts more or less move the p99 from one to the other
WARM_REGIME_MAX = 0.005
COLD_REGIME_MIN = 0.02
P99_TAIL = 0.01  # the share of requests above the p99


@dataclass(frozen=True)
class LoadPlan:
    rps: float
    duration_s: float
    pattern: str = "steady"  # steady | spiky | a CSV file of arrival times (s)
    seed: int = 0
    lambda_like: bool = False  # the endpoint's pool is Lambda-like (said in the report; the endpoint is built so)

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS and not Path(self.pattern).is_file():
            raise ValueError(f"pattern: steady, spiky or a CSV file of arrival times, got {self.pattern!r}")
        if not (math.isfinite(self.rps) and 0 < self.rps <= MAX_RPS):
            raise ValueError(f"rps: above 0 and at most {MAX_RPS:g}, got {self.rps:g}")
        if not (math.isfinite(self.duration_s) and 5 <= self.duration_s <= MAX_DURATION_S):
            raise ValueError(f"duration: from 5 s to {MAX_DURATION_S:g} s, got {self.duration_s:g}")

    def arrivals(self) -> list[float]:
        return schedule(self.pattern, self.rps, self.duration_s, self.seed)


# --- calibration: what the simulation is fed
def calibrate(endpoint, url: str, bodies: dict[str, bytes], requests: int = CALIBRATION_REQUESTS) -> dict:
    """Per model, at `CALIBRATION_RPS` or slower (a warm worker idle at each arrival): the service
    time (`X-Inference-Ms`), the overhead of a request (its latency beyond queued and service), the
    echo path's latency (a check on the overhead), the cold start (worker processes started one after
    the other, ms from start to ready). Samples, and their p50/p99."""
    out = {}
    for name, body in bodies.items():
        _, first = drive(url, [0.0], [Outgoing(f"/invocations/{name}", body, label=name)])  # a worker, loaded
        # spaced so that the warm worker is idle at each arrival (it alone serves them, none starts): the
        # service time of one request alone; invocations and echoes alternate
        gap = max(1 / CALIBRATION_RPS, 3 * (first[0].compute_ms or 0) / 1000)
        echo = Outgoing(f"/echo/{name}", body, label=name)
        invoke = Outgoing(f"/invocations/{name}", body, label=name)
        _, timed = drive(url, [i * gap for i in range(2 * requests)], [invoke, echo] * requests)
        served, echoes = timed[0::2], timed[1::2]
        failed = [t for t in [*first, *timed] if not t.ok]
        if failed:
            raise RuntimeError(
                f"calibration of {name}: {len(failed)} requests failed ({failed[0].status} {failed[0].error})"
            )
        # the overhead: each calibration request's latency beyond its time queued and in the worker (HTTP, the
        # body's decoding, the answer's encoding, the hops between threads): the whole path but the model
        overhead = [t.overhead_ms for t in served]
        # the service time: what holds the worker, from the request's hand-over to it (marked busy) to its
        # answer: `queued` (for a request that found the worker idle, the hand-over to its feeding thread)
        # and `compute` (the worker's round trip); the overhead holds no worker
        service = [t.queued_ms + t.compute_ms for t in served]
        handoff = [t.queued_ms for t in served]
        echo = [t.latency_ms for t in echoes]
        cold = endpoint.time_cold_starts(name, CALIBRATION_COLD_STARTS)
        out[name] = {
            "overhead_ms": overhead,
            "service_ms": service,
            "cold_start_ms": cold,
            "warm_latency_ms": [t.latency_ms for t in served],
            "summary": {
                "echo_p50_ms": float(np.percentile(echo, 50)),
                # the invocation path's overhead beyond the echo's (the hop to the worker's thread and back)
                # (signed: an echo answers its inputs, which may be larger than the model's outputs), the median
                # of each invocation's overhead less the echo sent right after it: a drift of the host's load
                # during the calibration moves both of a pair
                "invocation_over_echo_ms": float(np.median(np.asarray(overhead) - np.asarray(echo))),
                "overhead_p50_ms": float(np.percentile(overhead, 50)),
                "overhead_p99_ms": float(np.percentile(overhead, 99)),
                "service_p50_ms": float(np.percentile(service, 50)),
                "service_p99_ms": float(np.percentile(service, 99)),
                "handoff_p50_ms": float(np.percentile(handoff, 50)),
                "cold_start_p50_ms": float(np.median(cold)),
                "cold_start_ms": [round(c, 1) for c in cold],
            },
        }
        log.info(
            "loadtest_calibrated", model=name, **{k: v for k, v in out[name]["summary"].items() if k.endswith("_ms")}
        )
    return out


def probe_times(arrivals: list[float], seed: int = 0) -> list[float]:
    """When to probe (s): `PROBE_SHARE` of the arrivals, each moved a random part of the way to the
    next one, so that the probes follow the load's rate (a spiky pattern's bursts, which hold most
    of its requests and load the front end most, are probed as often as their requests come: probes
    evenly spaced in time under-weighted them, and the overhead fed was the quiet stretches')."""
    if len(arrivals) < 2:
        return []
    rng = np.random.default_rng(seed + 7)
    count = min(len(arrivals) - 1, max(1, round(PROBE_SHARE * len(arrivals))))
    picked = np.sort(rng.choice(len(arrivals) - 1, count, replace=False))
    at = np.asarray(arrivals, dtype=float)
    return (at[picked] + rng.uniform(0, 1, count) * (at[picked + 1] - at[picked])).tolist()


# --- running it
def run_loadtest(endpoint, plan: LoadPlan, out_dir: Path, app, hold_lock: bool = True) -> dict:
    """Drive `endpoint` (already started; `app` its HTTP app) by `plan`, after a calibration; the
    report (also written to `out_dir/report.json`, with `requests.csv`, `samples.json`, `loadtest.png`).
    `hold_lock`: take the machine's measurement lock for the calibration and the load (False: the
    caller holds it already, e.g. a bench of several loads)."""
    from serving.app import ServerThread
    from serving.wire import pack

    out_dir.mkdir(parents=True, exist_ok=True)
    bodies = {}
    for name, model in endpoint.models.items():  # the run's own reference inputs, as a binary body
        with np.load(model.reference_path, allow_pickle=False) as reference:
            inputs = {k.split(":", 1)[1]: reference[k] for k in reference.files if k.startswith("input:")}
        bodies[name] = pack(inputs)
    arrivals = plan.arrivals()
    rng = np.random.default_rng(plan.seed + 1)
    names = sorted(bodies)
    chosen = [names[i] for i in rng.integers(0, len(names), len(arrivals))]
    sent = [(t, Outgoing(f"/invocations/{n}", bodies[n], label=n)) for t, n in zip(arrivals, chosen, strict=True)]
    # echo probes all along the load: the front end's overhead under the load's own conditions
    probes = probe_times(arrivals, plan.seed)
    sent += [
        (
            float(t),
            Outgoing(
                f"/echo/{names[i % len(names)]}", bodies[names[i % len(names)]], label=f"echo:{names[i % len(names)]}"
            ),
        )
        for i, t in enumerate(probes)
    ]
    sent.sort(key=lambda pair: pair[0])
    arrivals, outgoing = [t for t, _ in sent], [o for _, o in sent]
    samples: list[dict] = []
    stop = threading.Event()
    # the calibration and the load are a measurement of this machine: they hold its measurement lock, so that
    # AYCI's own measurements (at a measurement's CPU weight, 256 times an ordinary process's) wait instead of
    # running beside them (they stalled the endpoint and the generator for seconds)
    waiting = time.monotonic()
    lock = measurement_lock.exclusive() if hold_lock else contextlib.nullcontext(0.0)
    with ServerThread(app) as url, lock as lock_wait_s:
        log.info("loadtest_lock_held", waited_s=round(lock_wait_s, 2))
        with endpoint.holding_workers():  # the calibration's worker stays warm between its requests
            calibration = calibrate(endpoint, url, bodies)
        endpoint.reset()  # the load starts on an endpoint with no worker, as the simulation's pool does
        sampler = threading.Thread(target=_sample, args=(endpoint, samples, stop), daemon=True)
        sampler.start()
        load_before, pressure_before = os.getloadavg(), cpu_pressure()
        try:
            t0_unix, timings = drive(url, arrivals, outgoing)
        finally:
            stop.set()
            sampler.join()
    held_s = time.monotonic() - waiting - lock_wait_s
    for s in samples:
        s["t"] = s.pop("at") - t0_unix
    (out_dir / "samples.json").write_text(json.dumps(samples))
    write_requests(timings, out_dir / "requests.csv")
    report = {
        "plan": asdict(plan),
        "machine": {
            "cores": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "cpu_pressure_before": pressure_before,
            "cpu_pressure_after": cpu_pressure(),
            "lock_wait_s": lock_wait_s,  # waiting for the machine's measurement lock (others' measurements)
            "lock_held_s": held_s,
        },
        "generator": generator_figures([t for t in timings if not t.label.startswith("echo:")]),
        "calibration": {n: c["summary"] for n, c in calibration.items()},
        "models": {},
        "out_dir": str(out_dir),
    }
    state = {row["model"]: row for row in endpoint.state()}
    for name, model in endpoint.models.items():
        mine = [t for t in timings if t.label == name]
        observed = observed_figures(mine, samples, name, state[name])
        probed = [t.latency_ms for t in timings if t.label == f"echo:{name}" and t.ok]
        observed["echo"] = percentiles(probed)
        fed = load_fed(calibration[name], mine, endpoint.policy.lambda_like, seed=plan.seed)
        predicted = predicted_figures(
            [t.scheduled_s for t in mine],
            fed,
            plan.duration_s,
            endpoint.policy.idle_s,
            endpoint.policy.max_workers,
            seed=plan.seed,
        )
        if predicted is not None:
            answered_ms = np.asarray([t.latency_ms for t in mine if t.ok], dtype=float)
            observed["waited_for_cold_share"] = (
                float(np.mean(answered_ms >= predicted["cold_wait_threshold_ms"])) if len(answered_ms) else 0.0
            )
        from_run = predicted_figures(
            [t.scheduled_s for t in mine],
            {
                "service_quantiles": latency_quantiles(model.result.latency_ms),
                "cold_start_ms": [model.result.cold_start_ms.total],
                "overhead_ms": [0.0],
            },
            plan.duration_s,
            endpoint.policy.idle_s,
            endpoint.policy.max_workers,
            seed=plan.seed,
        )
        report["models"][name] = {
            "combination": model.label,
            "run_id": model.run_id,
            "lambda_like": endpoint.policy.lambda_like,
            "observed": observed,
            "predicted": predicted,
            "from_run": from_run,
            "comparison": compare(observed, predicted),
            "regime": regime(observed, predicted),
        }
    plot(timings, samples, plan, out_dir / "loadtest.png")
    report["plot"] = str(out_dir / "loadtest.png")
    (out_dir / "report.json").write_text(json.dumps(report, indent=1))
    return report


def load_fed(calibration: dict, timings: list[RequestTiming], lambda_like: bool, seed: int = 0) -> dict:
    """What the simulation of a load is fed, from the load itself where it measured enough (else the
    calibration's `calibration`, one model's): the service each warm request got in its worker
    (`X-Inference-Ms`) plus the calibrated hand-over to the worker's thread; the overhead of each
    answered invocation (its latency beyond its time queued and in the worker: HTTP, the body's
    decoding and encoding, the hops between threads, the front end's own waiting under the load);
    and, for a Lambda-like pool, the cold starts its requests waited for (a cold request's
    `X-Queued-Ms`: from its arrival in the pool to its worker ready). The calibration's cold starts
    are timed one at a time on an idle pool; during the load the pool's took 0.8-1.3 times them
    (p50), and two started together up to 1.5 times (`bench_traffic_truth.py`).
    Each simulated arrival's service and overhead are drawn from the warm requests nearest to it in
    time (`nearest_draws`), so that the host's slow stretches stay where they were.
    This feeding is the load test's check only: the product's traffic answer is fed the run's
    measurement (Lambda's figures) and no front end. What is judged is the pool: queueing, cold
    starts and their share, reuse and reclaim."""
    fed = dict(calibration)
    answered = [t for t in timings if t.ok and t.queued_ms is not None and t.compute_ms is not None]
    # the time each request entered the pool, where every answered one says (`X-Pool-Entered-At`): the
    # simulation's arrivals, and the time before it (the front end) that request's own, added to its latency
    entries = bool(answered) and all(t.entered_s is not None for t in answered)
    overhead = [max(0.0, t.overhead_ms - (t.front_ms if entries else 0.0)) for t in answered]
    if len(overhead) >= MIN_PROBES:
        fed["overhead_ms"] = overhead
    worked = [t.compute_ms for t in answered if not t.cold]
    if len(worked) >= MIN_PROBES:
        handoff = calibration["summary"]["handoff_p50_ms"]
        fed["service_ms"] = [w + handoff for w in worked]
    colds = [t.queued_ms for t in answered if t.cold]
    if lambda_like and len(colds) >= MIN_COLD_FED:
        fed["cold_start_ms"] = colds
    local = len(worked) >= MIN_PROBES
    if local:
        fed["service_draws_ms"], fed["overhead_draws_ms"] = nearest_draws(
            timings, calibration["summary"]["handoff_p50_ms"], seed, entries
        )
    if local and entries:
        fronts = [t.front_ms for t in answered]
        typical = float(np.median(fronts))
        front = [t.front_ms if t.front_ms is not None else typical for t in timings]  # an error: the typical one
        fed["front_ms"] = fronts
        fed["entered_s"] = [t.scheduled_s + f / 1000 for t, f in zip(timings, front, strict=True)]
        fed["overhead_draws_ms"] = [o + f for o, f in zip(fed["overhead_draws_ms"], front, strict=True)]
    fed["sources"] = {
        "arrivals": "pool entries" if local and entries else "scheduled",
        "overhead": "load, nearest in time" if local else "load" if len(overhead) >= MIN_PROBES else "calibration",
        "service": "load, nearest in time" if local else "calibration",
        "cold_start": "load" if lambda_like and len(colds) >= MIN_COLD_FED else "calibration",
    }
    return fed


def nearest_draws(
    timings: list[RequestTiming], handoff_ms: float, seed: int = 0, after_entry: bool = False
) -> tuple[list[float], list[float]]:
    """One service time and one overhead per request of `timings` (in the order of their arrivals),
    both taken from one warm request answered among the `NEAREST` nearest to it in arrival order
    (the same request's service and overhead: the two move together): the host's speed moved with
    its load (in a spiky pattern's bursts, the warm requests' overhead p99 14 ms against 8 ms
    between them, their time in the worker p99 8 ms against 5 ms), and the simulation drawing both
    from the whole test put the bursts' slow requests anywhere (spiky p99 17-18 ms simulated against
    20-22 ms observed). `after_entry`: the overhead after the request entered the pool (its time before
    is the arrival's own, `load_fed`)."""
    order = [
        i for i, t in enumerate(timings) if t.ok and not t.cold and t.queued_ms is not None and t.compute_ms is not None
    ]
    rng = np.random.default_rng(seed + 11)
    warm_at = np.asarray(order)
    service, overhead = [], []
    half = NEAREST // 2
    for i in range(len(timings)):
        at = int(np.searchsorted(warm_at, i))  # the warm requests around arrival i
        lo = max(0, min(at - half, len(order) - NEAREST))
        pick = timings[order[lo + int(rng.integers(0, min(NEAREST, len(order))))]]
        service.append(pick.compute_ms + handoff_ms)
        before = pick.front_ms if after_entry and pick.front_ms is not None else 0.0
        overhead.append(max(0.0, pick.overhead_ms - before))
    return service, overhead


def regime(observed: dict, predicted: dict | None) -> dict:
    """Where the p99 lies (`WARM_REGIME_MAX`, `COLD_REGIME_MIN`): by the simulation's share of
    requests that waited for a cold start, the observed share beside it; and how many requests a p99 that
    stays on one side of them needs (`p99_determined_requests`, the larger of the two shares' figure)."""
    if predicted is None:
        return {"regime": None}
    share = predicted["waited_for_cold_share"]
    name = "warm tail" if share <= WARM_REGIME_MAX else "cold starts" if share >= COLD_REGIME_MIN else "edge"
    seen = observed.get("waited_for_cold_share")
    cold = observed.get("cold_share") or 0.0
    waited_per_cold = max(1.0, seen / cold) if seen and cold else 1.0
    needed = max(p99_determined_requests(s, waited_per_cold) for s in (share, seen) if s is not None)
    return {
        "regime": name,
        "predicted_share": share,
        "observed_share": seen,
        "p99_determined_at": needed if math.isfinite(needed) else None,  # None: no number of requests does
    }


def p99_determined_requests(waited_share: float, waited_per_cold: float = 1.0) -> float:
    """How many requests put the p99 on one side of those that waited for a cold start with 95 % confidence. The
    p99 lies among them when more than `P99_TAIL` of the requests waited, among the warm ones when fewer did; the
    count that waited is about binomial, each cold start held `waited_per_cold` of them at once (they come in
    clusters), so its standard deviation is sqrt(waited_per_cold * share * n), and the p99 stays on one side when
    the gap |share - P99_TAIL| * n is twice that: n >= 4 * waited_per_cold * share / (share - P99_TAIL)^2. At a
    share of 0.8 %, 8,000 requests; within 0.1 points of 1 %, a million."""
    if waited_share <= 0:
        return 0.0
    gap = abs(waited_share - P99_TAIL)
    return math.inf if gap == 0 else 4 * waited_per_cold * waited_share / gap**2


def cpu_pressure() -> float | None:
    """The share of the last 10 s some task waited for a CPU (`/proc/pressure/cpu`, "some avg10", %):
    how contended the host is (None where the kernel does not say)."""
    try:
        line = Path("/proc/pressure/cpu").read_text().splitlines()[0]
        return float(dict(part.split("=") for part in line.split()[1:])["avg10"])
    except (OSError, KeyError, ValueError, IndexError):
        return None


def _sample(endpoint, samples: list[dict], stop: threading.Event) -> None:
    while not stop.wait(SAMPLE_S):
        samples.append(
            {
                "at": time.time(),
                "models": {
                    r["model"]: {
                        "workers": r["workers"],
                        "starting": r["starting"],
                        "busy": r["busy"],
                        "queue": r["queue_depth"],
                        "loaded": r["loaded"],
                    }
                    for r in endpoint.state()
                },
            }
        )


def write_requests(timings: list[RequestTiming], path: Path) -> None:
    rows = [t.row() for t in timings]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["index"])
        writer.writeheader()
        writer.writerows(rows)


def read_requests(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# --- the figures
def percentiles(values, prefix: str = "") -> dict:
    """p50/p90/p95/p99 (ms) of `values` (NaN when there are none)."""
    values = np.asarray(values, dtype=float)
    found = np.percentile(values, PERCENTILES) if len(values) else [float("nan")] * len(PERCENTILES)
    return {f"{prefix}p{p}_ms": float(v) for p, v in zip(PERCENTILES, found, strict=True)}


def generator_figures(timings: list[RequestTiming]) -> dict:
    """How late the generator sent its requests (its own delay: large values mean the machine,
    not the endpoint, held the load back)."""
    lag = [t.send_lag_ms for t in timings]
    return {
        "requests": len(timings),
        "send_lag_p50_ms": float(np.percentile(lag, 50)) if lag else None,
        "send_lag_p99_ms": float(np.percentile(lag, 99)) if lag else None,
        "send_lag_max_ms": float(max(lag)) if lag else None,
    }


def observed_figures(timings: list[RequestTiming], samples: list[dict], name: str, state: dict) -> dict:
    answered = [t for t in timings if t.ok]
    errors: dict[str, int] = {}
    for t in timings:
        if not t.ok:
            key = str(t.status or "no answer")
            errors[key] = errors.get(key, 0) + 1
    cold_starts = sum(n for kind, n in state["loads"].items() if kind != "replacement")  # each a Lambda cold start
    waited = sum(bool(t.cold) for t in answered)
    workers = [s["models"][name]["workers"] + s["models"][name]["starting"] for s in samples if name in s["models"]]
    queued = [s["models"][name]["queue"] for s in samples if name in s["models"]]
    return {
        "requests": len(timings),
        "answered": len(answered),
        "errors": errors,
        **percentiles([t.latency_ms for t in answered]),
        "compute": percentiles([t.compute_ms for t in answered if t.compute_ms is not None]),
        "overhead": percentiles([t.overhead_ms for t in answered if t.overhead_ms is not None]),
        # from its scheduled time to its pool (part of the overhead above): the arrivals the pool saw
        "front": percentiles([t.front_ms for t in answered if t.front_ms is not None]),
        "queued": percentiles([t.queued_ms for t in answered if t.queued_ms is not None]),
        "cold_starts": cold_starts,
        "cold_share": cold_starts / len(answered) if answered else 0.0,
        "waited_for_load": waited,
        "waited_share": waited / len(answered) if answered else 0.0,
        "loads": state["loads"],
        "evictions": state["evictions"],
        "lost_workers": state["lost_workers"],
        "peak_workers": max(workers, default=0),
        "peak_queue": max(queued, default=0),
    }


def service_quantiles(samples_ms: list[float]) -> list[tuple[float, float]]:
    """The measured service times as (quantile, ms) points, as many as there are samples (at most
    `MAX_QUANTILE_POINTS`): the simulation draws from the distribution itself. Every percent was
    too coarse: the top percent was spread evenly between the p99 and the maximum, so one request
    of 2.3 s in a stall (p99 20 ms) gave a simulated percent of requests about 1.1 s each, which
    held the instances and queued hundreds of requests behind them."""
    qs = np.linspace(0, 1, min(len(samples_ms), MAX_QUANTILE_POINTS) + 1)
    return list(zip(qs.tolist(), np.quantile(np.asarray(samples_ms, dtype=float), qs).tolist(), strict=True))


def quantile_at(points: list[tuple[float, float]], q: float) -> float:
    """The value at quantile `q` of (quantile, value) points."""
    return float(np.interp(q, *zip(*points, strict=True)))


def predicted_figures(
    sent_at: list[float],
    fed: dict,
    duration_s: float,
    idle_s: float,
    max_workers: int,
    seed: int = 0,
) -> dict | None:
    """The simulation of these arrivals (None: fewer than 2): `fed` gives the service time
    (`service_ms` samples or `service_quantiles`), the cold start (`cold_start_ms` samples: their
    median, spread as the simulation spreads it) and the overhead (`overhead_ms` samples), as
    `calibrate` measured them; at most `max_workers` instances, idle ones reclaimed after `idle_s`."""
    if len(sent_at) < 2:
        return None
    rng = np.random.default_rng(seed + 2)
    warm = fed.get("service_quantiles") or service_quantiles(fed["service_ms"])
    colds = np.asarray(fed["cold_start_ms"], dtype=float) + quantile_at(warm, 0.5)  # to ready, then the request
    cold_ms = float(np.median(colds))
    # a load test's own draws, one per arrival (`nearest_draws`), when it gives them for these arrivals; the
    # arrivals when the pool saw them (`entered_s`), in the order it saw them, where the load test gives them
    per_arrival = {
        k: np.asarray(fed[k], dtype=float)
        for k in ("entered_s", "service_draws_ms", "overhead_draws_ms")
        if len(fed.get(k) or []) == len(sent_at)
    }
    times = per_arrival.pop("entered_s", np.asarray(sent_at, dtype=float))
    order = np.argsort(times, kind="stable")
    pool = simulate(
        times[order],
        warm,
        cold_ms,
        idle_s,
        rng,
        max(duration_s, float(times.max())),
        max_instances=max_workers,
        cold_samples_ms=colds if len(colds) > 1 else None,
        overhead_ms=np.asarray(fed["overhead_ms"], dtype=float),
        warm_draws_ms=per_arrival["service_draws_ms"][order] if "service_draws_ms" in per_arrival else None,
        overhead_draws_ms=per_arrival["overhead_draws_ms"][order] if "overhead_draws_ms" in per_arrival else None,
    )
    latencies = pool.latencies_ms
    threshold = cold_ms / 2  # a latency this long waited for a cold start (a warm one is ~100 times shorter)
    return {
        "simulated_requests": pool.requests,
        "cold_starts": pool.cold_starts,
        "cold_share": pool.cold_share,
        **percentiles(latencies),
        "peak_instances": pool.peak_instances,
        "cold_wait_threshold_ms": threshold,
        "waited_for_cold_share": float(np.mean(latencies >= threshold)) if len(latencies) else 0.0,
        "fed": {
            "service_p50_ms": quantile_at(warm, 0.5),
            "service_p99_ms": quantile_at(warm, 0.99),
            "cold_start_ms": cold_ms,
            "overhead_p50_ms": float(np.median(fed["overhead_ms"])),
            "overhead_p99_ms": float(np.percentile(fed["overhead_ms"], 99)),
            **(
                {
                    "front_p50_ms": float(np.median(fed["front_ms"])),
                    "front_p99_ms": float(np.percentile(fed["front_ms"], 99)),
                }
                if fed.get("front_ms")
                else {}
            ),
            "idle_timeout_s": idle_s,
            "max_instances": max_workers,
            "cold_starts_fed": len(fed["cold_start_ms"]),
            "sources": fed.get("sources"),
        },
    }


def cold_share_agrees(observed: float, predicted: float) -> tuple[bool, str]:
    """±`COLD_TOLERANCE` relative, or ±`COLD_ABS` (points) when the prediction is under `COLD_ABS_BELOW`."""
    if predicted < COLD_ABS_BELOW:
        return abs(observed - predicted) <= COLD_ABS, f"±{COLD_ABS * 100:g} points"
    return abs(observed - predicted) <= COLD_TOLERANCE * predicted, f"±{COLD_TOLERANCE:.0%}"


def compare(observed: dict, predicted: dict | None) -> dict:
    """Pass or fail, figure by figure, with both values: p50 and p99 within ±`TOLERANCE` of the
    prediction, the cold-start share by `cold_share_agrees`; the verdict passes only if all do.
    Nothing else turns a fail into a pass."""
    if predicted is None:
        return {"verdict": None, "figures": [], "reason": "too few requests reached this model to simulate"}
    figures = []
    for key, label in (("p50_ms", "p50"), ("p99_ms", "p99")):
        seen, guess = observed[key], predicted[key]
        ok = bool(math.isfinite(seen) and guess > 0 and abs(seen - guess) <= TOLERANCE * guess)
        figures.append(
            {
                "figure": label,
                "observed": seen,
                "predicted": guess,
                "ratio": seen / guess if guess else None,
                "bound": f"±{TOLERANCE:.0%}",
                "passed": ok,
            }
        )
    ok, bound = cold_share_agrees(observed["cold_share"], predicted["cold_share"])
    figures.append(
        {
            "figure": "cold-start share",
            "observed": observed["cold_share"],
            "predicted": predicted["cold_share"],
            "ratio": observed["cold_share"] / predicted["cold_share"] if predicted["cold_share"] else None,
            "bound": bound,
            "passed": ok,
        }
    )
    return {"verdict": "pass" if all(f["passed"] for f in figures) else "fail", "figures": figures}


def plot(timings: list[RequestTiming], samples: list[dict], plan: LoadPlan, path: Path) -> None:
    """Latency of every request against its scheduled time (cold loads and errors marked) above
    the workers of each model and the planned rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 7), height_ratios=[3, 2])
    for label, chosen, style in (
        ("warm", lambda t: t.ok and not t.cold, dict(s=6, color="tab:blue", alpha=0.5)),
        ("waited for a cold load", lambda t: t.ok and t.cold, dict(s=14, color="tab:orange")),
        ("refused / failed", lambda t: not t.ok, dict(s=14, color="tab:red", marker="x")),
    ):
        picked = [t for t in timings if chosen(t)]
        if picked:
            top.scatter(
                [t.scheduled_s for t in picked],
                [max(t.latency_ms, 0.1) for t in picked],
                label=f"{label} ({len(picked)})",
                **style,
            )
    top.set_yscale("log")
    top.set_ylabel("latency from the scheduled time (ms)")
    kind = "Lambda-like pool" if plan.lambda_like else "endpoint"
    top.set_title(
        f"ayci loadtest ({kind}, open loop): {Path(plan.pattern).name}, {plan.rps:g} req/s, {plan.duration_s:g} s"
    )
    top.legend(loc="upper right", fontsize=8)
    models = sorted({m for s in samples for m in s["models"]})
    times = [s["t"] for s in samples]
    for name in models:
        bottom.step(
            times,
            [
                s["models"].get(name, {}).get("workers", 0) + s["models"].get(name, {}).get("starting", 0)
                for s in samples
            ],
            where="post",
            label=f"{name} workers",
        )
    bottom.set_ylabel("workers (ready + loading)")
    bottom.set_xlabel("seconds into the test")
    if plan.pattern in PATTERNS:
        rate = bottom.twinx()
        grid = np.linspace(0, plan.duration_s, 400)
        rate.plot(
            grid,
            [rate_at(plan.pattern, plan.rps, plan.duration_s, t) for t in grid],
            color="grey",
            linestyle=":",
            label="planned req/s",
        )
        rate.set_ylabel("planned req/s")
    bottom.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
