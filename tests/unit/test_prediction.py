"""Measure three sizes, predict the rest: the CPU-quota simulation, the fit per regime, what
will not fit, fits the anchors contradict, the anchors a request measures, and memory ranges."""

from __future__ import annotations

import numpy as np
import pytest

from core.lambda_model.prediction import (
    Anchor,
    FamilyModel,
    NoPrediction,
    _throttled,
    predict_run,
    simulate_quota,
)
from core.run_plan import measured_and_predicted
from schemas.combos import Combo, Matrix, ModelRef, parse_memory_sizes
from schemas.documents import FailedCombination, SummaryResult
from schemas.events import FailureStage, RequestSubmitted
from schemas.lambda_limits import lambda_threads, lambda_vcpus

MODEL = ModelRef(
    sha256="a" * 64, size_bytes=45 << 20, format="onnx", workload="image_classification", input_size=[224, 224]
)


def result(
    memory_mb: int, p50: float, *, p99_factor: float = 1.2, cold: float = 300.0, peak: float = 150.0, **extra
) -> dict:
    latency = {
        "p50": p50,
        "p90": p50 * 1.1,
        "p99": p50 * p99_factor,
        "mean": p50 * 1.02,
        "min": p50 * 0.95,
        "max": p50 * p99_factor * 1.1,
        "ci95_low": p50 * 0.99,
        "ci95_high": p50 * 1.01,
        "p99_ci95_low": p50 * p99_factor * 0.95,
        "p99_ci95_high": p50 * p99_factor * 1.05,
        "cv": 0.02,
        "iterations": 300,
        "converged": True,
        "billed_ms_mean": p50 + 0.5,
    }
    combo = {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": memory_mb}
    return {
        "combo": combo,
        "latency_ms": latency,
        "cold_start_ms": {"total": cold},
        "peak_rss_mb": peak,
        "agreement": {"score": 1.0, "metric": "top1"},
        "confined": True,
        **extra,
    }


def test_a_quota_below_one_vcpu_stalls_the_inference_that_runs_out_of_it():
    # 38 ms of work in a 50 ms budget per 100 ms period: one inference runs through, three stall
    latencies = simulate_quota(np.full(400, 38.0), 0.5)
    assert sorted(set(np.round(latencies, 6))) == [38.0, 88.0]
    assert latencies.mean() == pytest.approx(38.0 / 0.5, rel=0.01)  # the CPU share is all it gets
    short = simulate_quota(np.full(2000, 5.0), 0.5)  # short inferences: most run unthrottled, the tail waits
    assert np.percentile(short, 50) == 5.0 and np.percentile(short, 99) == pytest.approx(55.0)


def throttled_anchor(memory_mb: int, one: dict, work_factor: float) -> dict:
    """What a measurement at `memory_mb` would give if the work were `work_factor` x the 1-vCPU one."""
    sim = _throttled(one["latency_ms"], lambda_vcpus(memory_mb), work_factor, seed=7)
    small = result(memory_mb, sim["p50"], cold=one["cold_start_ms"]["total"] * 2.5)
    small["latency_ms"].update(p99=sim["p99"], mean=sim["mean"], p90=sim["p90"])
    return small


def test_the_fit_follows_threads_and_calibrates_the_throttled_regime():
    one = result(1769, 10.0)
    small = throttled_anchor(512, one, 1.3)
    anchors = [Anchor(512, small), Anchor(1769, one), Anchor(3538, result(3538, 6.0))]
    model = FamilyModel.fit(anchors, [])
    assert model.predict(2048)["latency"]["p50"] == 10.0  # still one thread, never throttled
    assert model.predict(2048)["regime"] == "same_threads"
    three = model.predict(3 * 1769)  # A + B/n through (1, 10) and (2, 6): A = 2, B = 8
    assert three["latency"]["p50"] == pytest.approx(2 + 8 / 3) and three["beyond_measured_range"]
    low, high = three["interval"]["p50"]
    assert low < three["latency"]["p50"] < high
    assert model.work_factor == pytest.approx(1.3, rel=0.03)  # the simulation recovers the extra work
    at_small = model.predict(512)["latency"]
    assert at_small["p50"] == pytest.approx(small["latency_ms"]["p50"]) and at_small["p99"] == pytest.approx(
        small["latency_ms"]["p99"]
    )
    between = model.predict(1024)
    # the extra work is interpolated between the small anchor (1.3) and 1 vCPU (none)
    bounds = [_throttled(one["latency_ms"], lambda_vcpus(1024), k)["mean"] for k in (1.0, 1.3)]
    assert bounds[0] < between["latency"]["mean"] < bounds[1]
    assert not between["beyond_measured_range"]
    assert model.predict(256)["beyond_measured_range"]


def test_anchors_that_contradict_the_model_get_no_curve():
    slower = FamilyModel.fit([Anchor(1769, result(1769, 10.0)), Anchor(3538, result(3538, 13.0))], [])
    with pytest.raises(NoPrediction, match="slower with 2 vCPUs than with 1"):
        slower.predict(5120)
    assert slower.predict(2560)["latency"]["p50"] == 10.0  # one thread is still predicted
    faster = FamilyModel.fit([Anchor(512, result(512, 7.0)), Anchor(1769, result(1769, 10.0))], [])
    with pytest.raises(NoPrediction, match="faster with less CPU"):
        faster.predict(1024)
    host_limited = FamilyModel.fit(
        [Anchor(1769, result(1769, 10.0)), Anchor(3538, result(3538, 9.0, host_limited=True))], []
    )
    with pytest.raises(NoPrediction, match="host-limited"):
        host_limited.predict(5120)


def test_sizes_below_the_peak_or_an_out_of_memory_will_not_fit():
    request = RequestSubmitted(
        model=MODEL,
        matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[256, 300, 512, 1024, 1769]),
        predict=True,
    )
    measured, predicted = measured_and_predicted(request)
    assert sorted(c.memory_mb for c in measured) == [256, 1769]
    one = result(1769, 10.0, peak=280.0)
    results = [SummaryResult.of(r) for r in ({**throttled_anchor(256, one, 1.1), "peak_rss_mb": 200.0}, one)]
    rows, refused = predict_run(request, predicted, results, [], "us-east-1")
    assert {r.label: r.smallest_fit_mb for r in refused} == {"intel/onnx/b1/300MB": 308}
    assert refused[0].reason.startswith("will not fit: the measured peak is 280 MB")
    assert refused[0].stage == FailureStage.prediction
    assert [r.combo.memory_mb for r in rows] == [512, 1024]
    assert all(r.predicted and r.cost.per_million_inferences_usd > 0 for r in rows)
    assert all(r.smallest_fit_mb == 308 and r.interval.p50[0] < r.latency_ms.p50 < r.interval.p50[1] for r in rows)
    oom = [
        FailedCombination(
            combo_key="k-256",
            combo=Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=256),
            label="intel/onnx/b1/256MB",
            stage=FailureStage.inference,
            reason="out of memory at 256 MB (peak 256 MB)",
        )
    ]
    rows, refused = predict_run(request, predicted, [SummaryResult.of(one)], oom, "us-east-1")
    reasons = {r.label: r.reason for r in refused}
    assert "ran out of memory at 256 MB" in reasons["intel/onnx/b1/300MB"] or "peak" in reasons["intel/onnx/b1/300MB"]
    uncalibrated = {r.combo.memory_mb: r for r in rows}[512]  # the quota alone, marked beyond the measured range
    assert uncalibrated.prediction.regime == "throttled_uncalibrated" and uncalibrated.prediction.beyond_measured_range


def test_a_request_measures_at_most_three_anchors_per_family():
    matrix = Matrix(
        optimizers={"intel": ["base", "onnx"]}, batch_sizes=[1, 4], memory_sizes_mb=parse_memory_sizes("128-10240")
    )
    pt2 = MODEL.model_copy(update={"format": "pt2"})
    measured, predicted = measured_and_predicted(RequestSubmitted(model=pt2, matrix=matrix, predict=True))
    assert len(measured) == 2 * 2 * 3 and len(measured) + len(predicted) == 2 * 2 * 16
    onnx = sorted(c.memory_mb for c in measured if c.optimizer == "onnx" and c.batch_size == 1)
    base = sorted(c.memory_mb for c in measured if c.optimizer == "base" and c.batch_size == 1)
    assert onnx == [256, 1769, 3538] and base == [512, 1769, 3538]  # torch needs more memory to start than ONNX Runtime
    # an anchor the user did not ask for is measured too; without predict everything is measured
    few = Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1024, 1536, 2048, 2560])
    measured, _ = measured_and_predicted(RequestSubmitted(model=MODEL, matrix=few, predict=True))
    assert sorted(c.memory_mb for c in measured) == [1024, 1769]
    assert measured_and_predicted(RequestSubmitted(model=MODEL, matrix=few))[1] == []
    assert [lambda_threads(m) for m in (128, 1769, 3537, 3538, 10240)] == [1, 1, 1, 2, 5]


@pytest.mark.parametrize(
    "text, message",
    [
        ("100-512", "outside Lambda's 128-10240 MB"),
        ("3538-512", "runs backwards"),
        ("1024,big", "got 'big'"),
        (",", "no memory size"),
    ],
)
def test_memory_ranges_and_their_errors(text, message):
    assert parse_memory_sizes("512-1769,3538") == [512, 768, 1024, 1536, 1769, 3538]
    with pytest.raises(ValueError, match=message):
        parse_memory_sizes(text)


def test_the_predicted_sizes_of_a_family_whose_measured_sizes_were_skipped_are_skipped_too():
    """TVM's tuning skipped at a batch size (it cannot change the answer): its measured sizes end
    `skipped`, and so do its predicted ones, with the same reason (the run stays complete)."""
    request = RequestSubmitted(
        model=MODEL,
        matrix=Matrix(optimizers={"intel": ["tvm"]}, batch_sizes=[2], memory_sizes_mb=[512, 1024, 1769, 2048, 3538]),
        predict=True,
    )
    measured, predicted = measured_and_predicted(request)
    why = "tuning skipped: even TVM's largest gain seen leaves it dominated"
    skipped = [
        FailedCombination(combo_key=f"k-{c.memory_mb}", combo=c, label=c.label, stage=FailureStage.skipped, reason=why)
        for c in measured
    ]
    rows, refused = predict_run(request, predicted, [], skipped, "us-east-1")
    assert not rows and {r.label for r in refused} == {c.label for c in predicted} and predicted
    assert all(r.stage == FailureStage.skipped and r.reason == why for r in refused)
    failed = FailedCombination(
        combo_key="k", combo=measured[0], label=measured[0].label, stage=FailureStage.inference, reason="killed"
    )
    _, refused = predict_run(request, predicted, [], [failed], "us-east-1")  # a failed family: no prediction
    assert all(r.stage == FailureStage.prediction for r in refused)
