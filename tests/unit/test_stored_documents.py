"""Summaries and results written before the documents were typed still read, and give the same
API output; the typed models are what the readers use."""

import copy
import csv
import io
import json
from pathlib import Path

import pytest

from report import results_csv, results_document
from schemas.documents import (
    MeasuredResult,
    MeasurementReport,
    Recommendation,
    RunSummary,
    SummaryResult,
    TableRow,
)
from schemas.events import SchemaError

FIXTURES = Path(__file__).parent / "fixtures"


def stored(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def test_a_v1_summary_reads_typed():
    summary = RunSummary.read(stored("summary_v1_predicted.json"))
    assert json.loads(stored("summary_v1_predicted.json"))["document_version"] == 1
    measured = [r for r in summary.results if not r.predicted]
    predicted = [r for r in summary.results if r.predicted]
    assert len(measured) == 2 and len(predicted) == 2
    first = measured[0]
    assert first.label == "intel/onnx/b1/512MB"
    assert first.latency_ms.p99 > first.latency_ms.p50 > 0
    assert first.cost.per_million_inferences_usd > 0 and first.cost.price_region == "us-east-1"
    assert first.load.disturbed is False and first.load.other_busy_cores is not None
    assert first.environment.cpu_model and first.environment.libraries["onnxruntime"]
    assert predicted[0].interval.p50[0] < predicted[0].latency_ms.p50 < predicted[0].interval.p50[1]
    assert predicted[0].prediction.anchors
    assert summary.recommendation.fastest in {r.label for r in summary.results}
    assert set(summary.recommendation.pareto) <= set(summary.recommendation.candidates)
    assert summary.recommendation.criteria.min_agreement == 0.99


def test_a_v1_summary_gives_the_same_api_json_and_csv():
    """The API's JSON and CSV of a summary stored before the documents were typed, as they were
    then (the fixtures were written by the untyped code)."""
    summary = RunSummary.read(stored("summary_v1_predicted.json"))
    document = json.loads(json.dumps(results_document(summary, "http://x")))
    then = json.loads(stored("summary_v1_predicted.results.json"))
    # every field of then, with the same value (a field added since is no change of shape)
    assert {k: document[k] for k in then if k not in ("rows", "columns")} == {
        k: v for k, v in then.items() if k not in ("rows", "columns")
    }
    assert [c for c in document["columns"] if c in then["columns"]] == then["columns"]
    assert len(document["rows"]) == len(then["rows"])
    for row, old in zip(document["rows"], then["rows"], strict=True):
        assert {k: row.get(k, "missing") for k in old} == old
    csv_now = list(csv.DictReader(io.StringIO(results_csv(summary))))
    csv_then = list(csv.DictReader(io.StringIO(stored("summary_v1_predicted.results.csv").decode())))
    assert [{k: r.get(k) for k in old} for r, old in zip(csv_now, csv_then, strict=True)] == csv_then


def test_the_summary_round_trips_with_the_same_fields():
    """Written again it is the stored document, as version 2; each measured row keeps the
    version of the result it is."""
    raw = stored("summary_v1_predicted.json")
    old = json.loads(raw)
    again = json.loads(RunSummary.read(raw).to_bytes())
    assert again["document_version"] == RunSummary.VERSION == 2
    old["document_version"] = 2
    assert again == old
    assert RunSummary.read(RunSummary.read(raw).to_bytes()).to_dict() == again


def test_a_failed_run_summary_reads():
    summary = RunSummary.read(stored("summary_v1_failed.json"))
    assert summary.results == [] and summary.failures[0].label == "intel/onnx/b1/1769MB"
    rows = results_document(summary, "http://x")["rows"]
    assert rows == [
        {
            "combination": "intel/onnx/b1/1769MB",
            "combo_key": summary.failures[0].combo_key,
            "status": "failed",
            "note": rows[0]["note"],
        }
    ]
    assert rows[0]["note"].startswith("converter: ")


def test_the_upcaster_lists_the_disturbed_results_of_an_older_summary():
    """A summary written before AYCI listed the disturbed results gets the list from its rows."""
    old = json.loads(stored("summary_v1_predicted.json"))
    del old["recommendation"]["disturbed"]
    old["results"][1]["load"]["disturbed"] = True
    summary = RunSummary.read(json.dumps(old))
    assert summary.recommendation.disturbed == [summary.results[1].label]
    assert summary.results[1].disturbed and not summary.results[0].disturbed


def test_a_renamed_field_fails_on_reading_not_later():
    old = json.loads(stored("summary_v1_predicted.json"))
    renamed = copy.deepcopy(old)
    renamed["results"][0]["latency"] = renamed["results"][0].pop("latency_ms")
    with pytest.raises(SchemaError, match="latency_ms"):
        RunSummary.read(json.dumps(renamed))
    renamed = copy.deepcopy(old)
    renamed["results"][0]["cost"]["per_million_usd"] = renamed["results"][0]["cost"].pop("per_million_inferences_usd")
    with pytest.raises(SchemaError, match="per_million_inferences_usd"):
        RunSummary.read(json.dumps(renamed))


def test_a_v1_result_reads_and_extends_the_report():
    raw = stored("result_v1.json")
    result = MeasuredResult.read(raw)
    assert issubclass(MeasuredResult, MeasurementReport)
    # no field of the report is declared again
    own = set(MeasuredResult.__annotations__)
    assert own.isdisjoint(MeasurementReport.model_fields), own & set(MeasurementReport.model_fields)
    assert set(MeasurementReport.model_fields) <= set(MeasuredResult.model_fields)
    assert result.label == result.combo.label == "intel/onnx/b1/512MB"
    assert result.latency_ms.p99_estimate is True and result.latency_ms.p99_samples == 21
    assert result.cold_start_ms.total > result.cold_start_ms.model_load
    assert json.loads(result.to_bytes()) == json.loads(raw)
    # the row a summary makes of it: the result as stored, with `reused`
    row = SummaryResult.model_validate({**result.to_dict(), "reused": True})
    assert row.model_dump(mode="json", exclude_unset=True) == {**json.loads(raw), "reused": True}


def test_table_rows_keep_their_shape():
    summary = RunSummary.read(stored("summary_v1_predicted.json"))
    rows = results_document(summary, "http://x")["rows"]
    assert all(TableRow.model_validate(r).model_dump(mode="json", exclude_unset=True) == r for r in rows)
    assert Recommendation.model_validate(summary.recommendation.model_dump()).pick("fastest") == (
        summary.recommendation.fastest
    )


def v1_run_archived(recommendation) -> dict:
    """A `RunArchived` event as AYCI wrote it before its recommendation was typed (v1)."""
    return {
        "event_id": "e-1",
        "type": "RunArchived",
        "schema_version": 1,
        "run_id": "r-1",
        "time": "2026-11-01T10:00:00+00:00",
        "producer": "archiver",
        "payload": {
            "status": "complete",
            "summary_key": "runs/r-1/summary.json",
            "succeeded": 4,
            "failed": 0,
            "recommendation": recommendation,
        },
    }


def test_a_v1_run_archived_event_reads_with_a_typed_recommendation():
    from schemas.events import Envelope, RunArchived

    stored_recommendation = json.loads(stored("summary_v1_predicted.json"))["recommendation"]
    event = Envelope.parse(v1_run_archived(stored_recommendation))
    assert event.schema_version == RunArchived.VERSION == 2
    recommendation = event.payload.recommendation
    assert isinstance(recommendation, Recommendation)
    assert recommendation.fastest == stored_recommendation["fastest"]
    assert recommendation.criteria.min_agreement == 0.99
    first = next(iter(stored_recommendation["candidates"]))
    assert recommendation.candidates[first].p99_ms == stored_recommendation["candidates"][first]["p99_ms"]
    # written again (v2) and read back: the same recommendation
    assert Envelope.parse(event.to_json()).payload.recommendation == recommendation
    # a v1 recommendation that is no `Recommendation` is left out (the summary keeps the run's)
    odd = Envelope.parse(v1_run_archived({"fastest": ["not", "a", "label"]}))
    assert odd.payload.recommendation is None and odd.payload.succeeded == 4
    # a v2 event must fit: a renamed field of a candidate fails on reading
    broken = json.loads(event.to_json())
    broken["payload"]["recommendation"]["candidates"][first]["p99"] = broken["payload"]["recommendation"]["candidates"][
        first
    ].pop("p99_ms")
    with pytest.raises(SchemaError, match="p99_ms"):
        Envelope.parse(broken)


def test_pick_checks_written_with_untyped_rows_read_typed():
    """runs/{id}/checks.json as AYCI wrote it before its predicted rows were typed (the row a
    summary keeps, as a dict): each reads as a `SummaryResult`, and writes back the same JSON."""
    from schemas.documents import PickChecks

    row = next(r for r in json.loads(stored("summary_v1_predicted.json"))["results"] if r.get("predicted"))
    old = {
        "combos": {row["combo_key"]: row["combo"]},
        "predicted": {row["combo_key"]: row},
        "kinds": {row["combo_key"]: ["cheapest"]},
        "decided_by": "e-1",
    }  # no document_version: version 1
    checks = PickChecks.read(json.dumps(old))
    guess = checks.predicted[row["combo_key"]]
    assert isinstance(guess, SummaryResult) and guess.predicted
    assert guess.latency_ms.p50 == row["latency_ms"]["p50"] and guess.interval.p99 == row["interval"]["p99"]
    assert guess.label == checks.combos[row["combo_key"]].label
    assert json.loads(checks.to_bytes()) == {**old, "document_version": PickChecks.VERSION}
    renamed = copy.deepcopy(old)
    renamed["predicted"][row["combo_key"]]["interval"]["p99_range"] = renamed["predicted"][row["combo_key"]][
        "interval"
    ].pop("p99")
    with pytest.raises(SchemaError, match="p99"):
        PickChecks.read(json.dumps(renamed))
