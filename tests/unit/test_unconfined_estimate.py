"""Memory sizes estimated from one unconfined, single-thread measurement (core/lambda_model/unconfined.py):
the CPU-quota simulation below 1 vCPU, the measurement itself above, marked and with an interval."""

from __future__ import annotations

import pytest

from core.lambda_model.unconfined import ESTIMATED_UNCONFINED, estimate_at

MEASURED = {
    "threads": 1,
    "confined": False,
    "latency_ms": {"p50": 30.0, "p90": 32.0, "p99": 36.0, "min": 28.0, "max": 40.0, "mean": 30.5},
    "cold_start_ms": {"total": 900.0, "first_inference": 60.0},
}


def test_below_one_vcpu_the_quota_stretches_the_latency_as_the_simulation_says():
    """At 884 MB (0.5 vCPU) a 30 ms inference gets 50 ms of CPU per 100 ms period: one runs in one
    period when it starts early enough, two back to back cross a stall; the mean doubles."""
    half = estimate_at(MEASURED, 884)
    assert half["mark"] == ESTIMATED_UNCONFINED and half["regime"] == "throttled_uncalibrated"
    assert half["latency_ms"]["mean"] == pytest.approx(2 * 30.5, rel=0.1)
    assert half["latency_ms"]["p99"] > 36.0 and half["cold_start_ms"]["total"] == pytest.approx(900 / (884 / 1769))
    low, high = half["interval"]["p50"]
    assert low < half["latency_ms"]["p50"] < high and (high - low) / half["latency_ms"]["p50"] > 0.4


def test_from_one_vcpu_the_measurement_and_from_two_an_upper_bound():
    one = estimate_at(MEASURED, 1769)
    assert one["latency_ms"]["p50"] == 30.0 and "upper bound" not in one["basis"]
    four = estimate_at(MEASURED, 7076)
    assert four["latency_ms"]["p50"] == 30.0 and "upper bound" in four["basis"] and "4 threads" in four["basis"]


def test_a_measurement_with_more_than_one_thread_is_refused():
    with pytest.raises(ValueError, match="one-thread"):
        estimate_at({**MEASURED, "threads": 2}, 1769)


def test_an_estimate_may_be_recommended_where_a_plain_unconfined_row_may_not():
    from core.lambda_model.unconfined import apply_estimate
    from report.recommendation import exclusion

    report = {
        **MEASURED,
        "latency_ms": {**MEASURED["latency_ms"], "ci95_low": 29.0, "ci95_high": 31.0, "billed_ms_mean": 31.0},
        "cold_start_ms": {
            "total": 900.0,
            "process_start": 40.0,
            "imports": 500.0,
            "model_load": 300.0,
            "first_inference": 60.0,
        },
        "host_limited": False,
    }
    estimated = apply_estimate(report, 884, "not root")
    assert estimated["cold_start_ms"]["imports"] == pytest.approx(500 * 1769 / 884)
    assert estimated["latency_ms"]["billed_ms_mean"] >= estimated["latency_ms"]["mean"]
    row = {
        "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 884},
        "agreement": {"score": 1.0, "metric": "top1"},
        "cost": {"per_million_inferences_usd": 1.0},
        "confined": False,
    }
    plain = {**row, **report, "confinement_reason": "not root"}
    assert "unconfined" in exclusion(plain, slo_p99_ms=None, min_agreement=0.99)
    assert exclusion({**row, **estimated}, slo_p99_ms=None, min_agreement=0.99) is None


def test_the_inference_handler_turns_the_launcher_s_one_thread_mark_into_the_estimate():
    """The launcher only says it measured one unconfined thread for the size (`ONE_THREAD_FOR_ITS_SIZE`);
    the handler that builds the result makes it the size's estimate, with the size's vCPUs."""
    from pathlib import Path

    from measuring.launcher import ONE_THREAD_FOR_ITS_SIZE, MeasureSpec
    from services.inference.handlers import estimated

    spec = MeasureSpec(
        optimizer="onnx",
        workload="image_classification",
        artifact_path=Path("a"),
        reference_path=Path("r"),
        memory_mb=884,
    )
    report = {**MEASURED, "confinement_reason": "not root", "vcpus": 1.0}
    assert estimated(dict(report), spec) == report  # no mark: as measured
    marked = estimated({**report, ONE_THREAD_FOR_ITS_SIZE: True}, spec)
    assert ONE_THREAD_FOR_ITS_SIZE not in marked and marked["estimate"]["mark"] == ESTIMATED_UNCONFINED
    assert marked["vcpus"] == spec.vcpus and marked["latency_ms"]["mean"] == pytest.approx(2 * 30.5, rel=0.1)
