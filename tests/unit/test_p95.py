"""The p95 beside the p50, p90 and p99 wherever percentiles are shown: measured, stored, in the
table (terminal, CSV, JSON, email), predicted, and absent (never invented) for a result
measured before the p95 was kept."""

from __future__ import annotations

import csv
import io
import itertools

import numpy as np
import pytest
from rich.console import Console

from core.lambda_model.prediction import Anchor, FamilyModel
from measuring import measure
from report import results_csv, results_document
from report.render import email_message
from report.table import summary_rows
from report.terminal import results_table
from schemas.documents import Latency
from tests.conftest import archived_summary, measured_result


def test_the_measurement_keeps_the_p95_between_the_p90_and_the_p99(monkeypatch):
    order = np.random.default_rng(0).permutation(100)
    durations = itertools.cycle([1.0 + float(i) for i in order])  # 1..100 ms, shuffled
    seen: list[float] = []

    def timed(run, inputs):
        seen.append(next(durations))
        return seen[-1]

    monkeypatch.setattr(measure, "timed", timed)
    report = measure.measure_warm(lambda _: None, None, min_iterations=100, cap_s=0.05)
    assert report["p95"] == pytest.approx(float(np.percentile(seen, 95)), rel=0.02)
    assert report["p90"] < report["p95"] < report["p99"]
    assert 90 < report["p95"] < 98


def with_p95(label: str, p99: float, p95: float) -> dict:
    result = measured_result(label, p99=p99, cost=0.5)
    result["latency_ms"]["p95"] = p95
    return result


def test_the_table_shows_the_p95_beside_the_others_in_every_rendering():
    summary = archived_summary(
        "r1",
        "complete",
        [with_p95("intel/onnx/b1/1769MB", 20.0, 17.25), with_p95("intel/base/b1/1769MB", 40.0, 33.5)],
        [],
    )
    rows = summary_rows(summary)
    assert [r.p95_ms for r in rows] == [17.25, 33.5]
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(results_table(summary))
    text = console.file.getvalue()
    header = next(line for line in text.splitlines() if "p50 ms" in line)
    assert header.index("p90 ms") < header.index("p95 ms") < header.index("p99 ms")
    assert "17.2" in text and "33.5" in text
    csv_rows = list(csv.DictReader(io.StringIO(results_csv(summary))))
    assert [float(r["p95_ms"]) for r in csv_rows] == [17.25, 33.5]
    document = results_document(summary, "http://x")
    assert {"key": "p95_ms", "title": "p95 ms"} in document["columns"]
    assert document["rows"][0]["p95_ms"] == 17.25
    email = email_message(summary, "http://x")
    assert "p95 ms" in email["text"] and "p95 ms" in email["html"] and "33.5" in email["text"]


def test_a_result_measured_before_the_p95_shows_none_and_the_column_is_left_out():
    old = measured_result("intel/onnx/b1/1769MB", p99=20.0, cost=0.5)  # no p95: stored before it was kept
    assert "p95" not in old["latency_ms"]
    assert Latency.model_validate(old["latency_ms"]).p95 is None
    summary = archived_summary("r0", "complete", [old], [])
    assert summary_rows(summary)[0].p95_ms is None
    console = Console(file=io.StringIO(), width=250, color_system=None)
    console.print(results_table(summary))
    assert "p95 ms" not in console.file.getvalue() and "p90 ms" in console.file.getvalue()


def anchor_result(memory_mb: int, p50: float, p95: float | None) -> dict:
    latency = {"p50": p50, "p90": p50 * 1.1, "p99": p50 * 1.3, "mean": p50 * 1.02, "min": p50 * 0.95}
    latency |= {"max": p50 * 1.4, "ci95_low": p50 * 0.99, "ci95_high": p50 * 1.01}
    latency |= {"p99_ci95_low": p50 * 1.25, "p99_ci95_high": p50 * 1.35, "iterations": 300}
    if p95 is not None:
        latency["p95"] = p95
    combo = {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": memory_mb}
    return {"combo": combo, "latency_ms": latency, "cold_start_ms": {"total": 300.0}, "confined": True}


def test_a_predicted_size_has_a_p95_when_its_anchors_have_one():
    model = FamilyModel.fit(
        [Anchor(1769, anchor_result(1769, 10.0, 12.0)), Anchor(3538, anchor_result(3538, 6.0, 7.0))], []
    )
    assert model.predict(2048)["latency"]["p95"] == 12.0  # one thread: as at 1,769 MB
    assert model.predict(3 * 1769)["latency"]["p95"] == pytest.approx(2 * 7.0 - 12.0 + (2 * 12.0 - 2 * 7.0) / 3)
    throttled = model.predict(1024)["latency"]
    assert throttled["p90"] <= throttled["p95"] <= throttled["p99"]
    old = FamilyModel.fit(
        [Anchor(1769, anchor_result(1769, 10.0, None)), Anchor(3538, anchor_result(3538, 6.0, None))], []
    )
    assert "p95" not in old.predict(3 * 1769)["latency"] and "p95" not in old.predict(2048)["latency"]
