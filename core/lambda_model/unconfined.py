"""A pick from a machine that cannot confine (no root, no cgroups: an unprivileged Linux user, macOS):
each memory size estimated from one unconfined, single-thread measurement.

Without cgroups the launcher measures unconfined (`measuring/confinement.unavailable_reason`: "not
root"), and an unconfined row is never recommended (`report/recommendation.py`): the run ends with no
pick. Measured with one thread, an unconfined inference takes the work one thread needs, unthrottled;
Lambda's share at each memory size follows from it through the same CPU-quota simulation the
prediction uses (`core.lambda_model.prediction`):

- below 1 vCPU, one thread gets `vCPUs x 100 ms` per 100 ms period: the measured distribution's
  inferences run back to back through the quota (`prediction._throttled`, work factor 1, since an
  unconfined thread is the 1-vCPU thread's work);
- from 1 vCPU, one thread is never throttled: the measurement itself. From 2 vCPUs Lambda would run
  `floor(vCPUs)` threads, faster than one: the one-thread figure is an upper bound, and said so;
- the cold start (CPU-bound: imports, model load) scales as `1 / vCPUs` below 1 vCPU.

Each estimate is marked `ESTIMATED_UNCONFINED` with an interval (about 95 %): the measurement's own
confidence interval, the quota model's uncalibrated error (`MODEL_ERROR["throttled_uncalibrated"]`:
no confined anchor calibrates it), and `HOST_ERROR` for a host where other work is not held back by
a CPU weight.
"""

from __future__ import annotations

import math
from typing import Any

from core.lambda_model.prediction import COLD_START_ERROR, MODEL_ERROR, P99_ERROR_FACTOR, _throttled, relative_ci
from schemas.lambda_limits import lambda_threads, lambda_vcpus

ESTIMATED_UNCONFINED = "estimated, unconfined"
HOST_ERROR = 0.10  # unconfined: other work on the machine is not held back by a CPU weight


def estimate_at(measured: dict[str, Any], memory_mb: int) -> dict[str, Any]:
    """One memory size of a combination from its unconfined single-thread measurement `measured` (a
    result's dict: `latency_ms`, `cold_start_ms`, `threads`): `latency_ms`, `cold_start_ms`, `interval`
    (p50 and p99 bounds), `regime`, `basis`, and `mark` ("estimated, unconfined")."""
    if (measured.get("threads") or 1) != 1:
        raise ValueError(
            f"an unconfined estimate needs a one-thread measurement, got {measured.get('threads')} threads"
        )
    latency = measured["latency_ms"]
    vcpus = lambda_vcpus(memory_mb)
    cold = (measured.get("cold_start_ms") or {}).get("total")
    if vcpus < 1:
        regime = "throttled_uncalibrated"
        simulated = _throttled(latency, vcpus, 1.0)
        estimate = {k: simulated[k] for k in ("p50", "p90", "p95", "p99", "mean")}
        cold = None if cold is None else cold / vcpus
        basis = f"one unconfined thread's work through a CPU quota of {vcpus:.2f} vCPU (100 ms periods)"
    else:
        regime = "same_threads"
        estimate = {k: latency[k] for k in ("p50", "p90", "p95", "p99", "mean") if latency.get(k) is not None}
        basis = "one unconfined thread, never throttled from 1 vCPU"
        if lambda_threads(memory_mb) > 1:
            basis += f": an upper bound (Lambda would run {lambda_threads(memory_mb)} threads)"
    model = MODEL_ERROR[regime] + HOST_ERROR
    p50_error = model + relative_ci(latency.get, "p50")
    p99_error = model * P99_ERROR_FACTOR + relative_ci(latency.get, "p99")
    interval = {  # the shape of a prediction's (`schemas.recommendation.Interval`): the table shows it
        "level": f"~95% ({ESTIMATED_UNCONFINED})",
        "p50": [estimate["p50"] * (1 - p50_error), estimate["p50"] * (1 + p50_error)],
        "p99": [estimate["p99"] * max(0.0, 1 - p99_error), estimate["p99"] * (1 + p99_error)],
    }
    if cold is not None:
        interval["cold_start_ms"] = [
            cold * (1 - COLD_START_ERROR - HOST_ERROR),
            cold * (1 + COLD_START_ERROR + HOST_ERROR),
        ]
    return {
        "memory_mb": memory_mb,
        "vcpus": vcpus,
        "latency_ms": estimate,
        "cold_start_ms": None if cold is None else {"total": cold},
        "interval": interval,
        "regime": regime,
        "basis": basis,
        "mark": ESTIMATED_UNCONFINED,
        "error": {"p50": p50_error, "p99": p99_error},
        "confidence": 0.95 if math.isfinite(p50_error) else None,
    }


def is_estimated(result: Any) -> bool:
    """Whether a result (a row or its dict) is an unconfined estimate (`apply_estimate`)."""
    estimate = result.get("estimate") if isinstance(result, dict) else getattr(result, "estimate", None)
    return isinstance(estimate, dict) and estimate.get("mark") == ESTIMATED_UNCONFINED


def apply_estimate(report: dict[str, Any], memory_mb: int, reason: str | None) -> dict[str, Any]:
    """A measuring process's report (one thread, unconfined because `reason`) as the memory size's
    estimate: its latency and cold start through `estimate_at` (the other latency figures scaled with
    the mean, the cold start's parts with its total), its `interval`, and `estimate` (the mark, the
    basis, what was measured); `confinement_reason` says it is estimated, `host_limited` is off (one
    thread needs one core). The result stays `confined: false`."""
    measured = {**report, "threads": 1}
    estimate = estimate_at(measured, memory_mb)
    latency = dict(report["latency_ms"])
    ratio = estimate["latency_ms"]["mean"] / latency["mean"] if latency.get("mean") else 1.0
    for key in ("min", "max", "ci95_low", "ci95_high", "billed_ms_mean"):
        if latency.get(key) is not None:
            latency[key] = latency[key] * ratio
    if latency.get("billed_ms_mean") is not None:
        latency["billed_ms_mean"] = max(1.0, math.ceil(latency["billed_ms_mean"]))
    latency.update(estimate["latency_ms"])
    cold = dict(report.get("cold_start_ms") or {})
    if cold.get("total") and estimate["cold_start_ms"]:
        factor = estimate["cold_start_ms"]["total"] / cold["total"]
        cold = {
            k: v * factor if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in cold.items()
        }
    return {
        **report,
        "latency_ms": latency,
        "cold_start_ms": cold or report.get("cold_start_ms"),
        "interval": estimate["interval"],
        "estimate": {
            "mark": ESTIMATED_UNCONFINED,
            "basis": estimate["basis"],
            "regime": estimate["regime"],
            "measured": {
                "p50_ms": report["latency_ms"]["p50"],
                "p99_ms": report["latency_ms"]["p99"],
                "cold_start_ms": (report.get("cold_start_ms") or {}).get("total"),
                "threads": 1,
            },
        },
        "confinement_reason": f"{ESTIMATED_UNCONFINED} ({reason or 'no cgroups'}): {estimate['basis']}",
        "host_limited": False,
    }
