"""Whole runs through every service on the embedded bus, with fakes for the engines, the
measurement and the mailer (`embedded(..., store=, parts=)`): every kind of run in
milliseconds, no torch. The same runs with real engines are in tests/e2e and tests/integration."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from adapters.memory_store import MemoryStore
from engines import Conversion
from measuring.launcher import MeasurementFailed
from schemas import keys
from schemas.combos import Matrix, ModelRef
from schemas.events import Envelope, RequestSubmitted
from services.archiver.handlers import ArchiverDeps, announcement_id, on_inference_done
from services.converter.reference import ReferenceFailed
from services.request.replay import replay
from services.request.submission import new_run
from tests.conftest import ENVIRONMENT
from tests.fakes import embedded_with_fakes

BROKEN_MODEL = "b" * 64


class Fakes:
    """The engines, the measuring process and the mailer, counting what they were asked."""

    def __init__(self) -> None:
        self.conversions: Counter[str] = Counter()
        self.measurements: Counter[tuple] = Counter()
        self.sent: list[dict] = []
        self.out_of_memory_below_mb = 0
        self.crash = False  # the measurement crashes the handler (not a failure it reports)
        self.billed_ms = 2.0

    def convert(self, optimizer, job) -> Conversion:
        (job.out_dir / "model.fake").write_bytes(b"artifact")
        self.conversions[f"{optimizer.value}/b{job.batch_size}"] += 1
        return Conversion(artifact_file="model.fake", conversion_s=0.01)

    def compute_reference(
        self, model_path, model_json, workload, input_size, batch, out_path, *, timeout_s, memory_mb, inputs_path=None
    ) -> None:
        if ModelRef.model_validate_json(model_json).sha256 == BROKEN_MODEL:
            raise ReferenceFailed("RuntimeError: the model expects 4 channels")
        np.savez(
            out_path,
            **{"input:pixels": np.zeros((batch, 3, 2, 2), np.float32), "output:0": np.zeros((batch, 10), np.float32)},
        )

    def measure(self, spec, python_command) -> dict:
        if self.crash:
            raise RuntimeError("the measuring worker crashed")
        self.measurements[(spec.optimizer, spec.memory_mb)] += 1
        if spec.memory_mb < self.out_of_memory_below_mb:
            raise MeasurementFailed(f"out of memory at {spec.memory_mb} MB (peak 300 MB)")
        p50 = 1000.0 / spec.memory_mb
        latency = {
            "p50": p50,
            "p90": p50 * 1.1,
            "p99": p50 * 1.2,
            "mean": p50,
            "min": p50 * 0.9,
            "max": p50 * 1.3,
            "ci95_low": p50 * 0.99,
            "ci95_high": p50 * 1.01,
            "cv": 0.02,
            "iterations": 200,
            "converged": True,
            "billed_ms_mean": self.billed_ms,
        }
        cold = {"process_start": 50.0, "imports": 100.0, "model_load": 40.0, "first_inference": 5.0, "total": 200.0}
        return {
            "cold_start_ms": cold,
            "latency_ms": latency,
            "warmup_iterations": 10,
            "agreement": {"score": 1.0, "metric": "top1"},
            "peak_rss_mb": 120.0,
            "confined": True,
            "threads": 1,
            "vcpus": spec.memory_mb / 1769,
            "environment": ENVIRONMENT,
        }

    def send(self, *, to, subject, text, html) -> str:
        self.sent.append({"to": to, "subject": subject})
        return f"message-{len(self.sent)}"


@pytest.fixture
def fakes() -> Fakes:
    return Fakes()


@pytest.fixture
def app(tmp_path, fakes):
    return embedded_with_fakes(tmp_path, fakes, MemoryStore())


def stored_model(app, sha256: str = "a" * 64) -> ModelRef:
    app.store.put_bytes(keys.model(sha256), b"model bytes")
    return ModelRef(sha256=sha256, size_bytes=11, format="onnx", workload="image_classification", input_size=[2, 2])


def request(
    app, *, memory=(1769, 3538), optimizers=("onnx",), hardware="intel", sha256="a" * 64, **extra
) -> RequestSubmitted:
    matrix = Matrix(optimizers={hardware: list(optimizers)}, batch_sizes=[1], memory_sizes_mb=list(memory))
    # every combination to full precision; racing: tests/unit/test_racing_runs.py
    extra = {"precision": "exact", **extra}
    return RequestSubmitted(model=stored_model(app, sha256), matrix=matrix, email="user@example.com", **extra)


def run(app, req: RequestSubmitted, copies: int = 1) -> dict:
    envelope = new_run(req)
    app.publisher.publish([envelope] * copies)
    app.bus.run_until_idle()
    return json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))


def test_a_complete_run_measures_every_combination_and_sends_one_email(app, fakes):
    summary = run(app, request(app))
    assert summary["status"] == "complete" and len(summary["results"]) == 2 and not summary["failures"]
    assert fakes.conversions == {"onnx/b1": 1}  # one artifact serves both memory sizes
    assert fakes.measurements == {("onnx", 1769): 1, ("onnx", 3538): 1}
    assert summary["recommendation"]["fastest"] == "intel/onnx/b1/3538MB"
    assert len(fakes.sent) == 1 and "complete" in fakes.sent[0]["subject"]


def test_a_partial_run_keeps_what_was_measured(app, fakes):
    fakes.out_of_memory_below_mb = 1024
    summary = run(app, request(app, memory=(512, 1769)))
    assert summary["status"] == "partial"
    (failure,) = summary["failures"]
    assert failure["label"] == "intel/onnx/b1/512MB" and failure["reason"].startswith("out of memory at 512 MB")


def test_a_model_that_does_not_run_fails_every_combination(app, fakes):
    summary = run(app, request(app, sha256=BROKEN_MODEL))
    assert summary["status"] == "failed" and {f["stage"] for f in summary["failures"]} == {"converter"}
    assert all("expects 4 channels" in f["reason"] for f in summary["failures"])
    assert not fakes.measurements and len(fakes.sent) == 1


def test_a_second_run_reuses_results_and_force_measures_again(app, fakes):
    run(app, request(app))
    reused = run(app, request(app))
    assert reused["status"] == "complete" and all(r["reused"] for r in reused["results"])
    assert sum(fakes.measurements.values()) == 2
    forced = run(app, request(app, force=True))
    assert not any(r["reused"] for r in forced["results"]) and sum(fakes.measurements.values()) == 4
    assert fakes.conversions == {"onnx/b1": 1}  # the stored artifact still serves


def test_force_adds_a_result_version_and_never_changes_what_another_run_used(app, fakes):
    first = run(app, request(app, memory=(1769,)))
    forced = run(app, request(app, memory=(1769,), force=True))
    reused = run(app, request(app, memory=(1769,)))
    (key,) = [r["combo_key"] for r in first["results"]]
    versions = sorted(k for k in app.store.list_keys(f"results/{key}/"))
    assert versions == sorted([keys.result_version(key, first["run_id"]), keys.result_version(key, forced["run_id"])])
    assert json.loads(app.store.get_bytes(versions[0]))["run_id"] in (
        first["run_id"],
        forced["run_id"],
    )  # each version intact
    done = [
        Envelope.parse(app.store.get_bytes(k)).payload
        for k in app.store.list_keys(keys.event_log_prefix(reused["run_id"]))
        if "-CombosReused-" in k
    ]
    assert [d.results for d in done] == [
        {key: keys.result_version(key, forced["run_id"])}
    ]  # the reuse names the exact version


def test_a_crashing_measurement_is_dead_lettered_and_the_run_still_ends(app, fakes):
    fakes.crash = True
    summary = run(app, request(app, memory=(1769,)))
    assert summary["status"] == "failed"
    (failure,) = summary["failures"]
    assert failure["stage"] == "dead_letter" and "the measuring worker crashed" in failure["reason"]
    assert [queue for queue, _, _ in app.bus.dead_letters] == ["inference-intel"]


def test_every_event_delivered_twice_changes_nothing(app, fakes):
    summary = run(app, request(app), copies=2)
    assert summary["status"] == "complete" and len(summary["results"]) == 2
    assert sum(fakes.measurements.values()) == 2 and len(fakes.sent) == 1


def test_a_replay_from_model_converted_is_a_new_run_linked_to_the_old(app, fakes):
    first = run(app, request(app))
    envelopes = replay(app.store, first["run_id"], "ModelConverted", force=True)
    app.publisher.publish(envelopes)
    app.bus.run_until_idle()
    again = json.loads(app.store.get_bytes(keys.summary(envelopes[0].run_id)))
    assert again["status"] == "complete" and again["request"]["replay_of"] == first["run_id"]
    assert sum(fakes.measurements.values()) == 4 and fakes.conversions == {"onnx/b1": 1}


def test_a_combination_that_never_reports_is_failed_at_the_deadline(app, fakes):
    app.bus.runners.pop("inference-arm")  # no arm worker: its combination never reports
    req = request(app, memory=(1769,))
    req = req.model_copy(
        update={
            "matrix": Matrix(optimizers={"intel": ["onnx"], "arm": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769])
        }
    )
    summary = run(app, req)
    assert summary["status"] == "partial" and summary["closed_at_deadline"]
    (failure,) = summary["failures"]
    assert failure["label"] == "arm/onnx/b1/1769MB" and failure["stage"] == "deadline"


def test_two_archivers_racing_on_the_last_arrival_archive_once(app, fakes):
    summary = run(app, request(app))
    run_id = summary["run_id"]
    del app.store.objects[keys.summary(run_id)]  # as if the last two arrivals were just being handled, at once
    packs = app.store.list_keys(keys.result_packs_prefix(summary["model"]["sha256"]))
    arrivals = [
        Envelope.parse(app.store.get_bytes(k))
        for k in app.store.list_keys(keys.event_log_prefix(run_id))
        if "-InferenceDone-" in k
    ]
    announced, start = [], threading.Barrier(2)

    def archiver(arrival: Envelope) -> None:
        start.wait()
        announced.extend(on_inference_done(arrival, ArchiverDeps(app.store)))

    threads = [threading.Thread(target=archiver, args=(arrival,)) for arrival in arrivals]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # one summary; whoever announces it (the loser too, until the notifier records it) uses the run's one id
    assert {a.event_id for a in announced} == {announcement_id(run_id)}
    assert len(app.store.list_keys(keys.result_packs_prefix(summary["model"]["sha256"]))) == len(packs) + 1


def test_a_cancelled_run_ends_at_once_and_its_pending_work_is_skipped(app, fakes):
    from services.request.runs import cancel_run, record_run

    req = request(app)
    envelope = new_run(req)
    record_run(app.store, envelope.run_id, req)
    cancelled = []

    def cancel_at_the_first_conversion(queue, event) -> None:
        if event.type == "ComboPending" and not cancelled:
            record = json.loads(app.store.get_bytes(keys.run_record(envelope.run_id)))
            cancelled.append(cancel_run(app.store, record, app.bus.now()))
            app.publisher.publish(cancelled)

    app.bus.observers.append(cancel_at_the_first_conversion)
    app.publisher.publish([envelope])
    app.bus.run_until_idle()
    summary = json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "failed" and {f["stage"] for f in summary["failures"]} == {"cancelled"}
    assert not fakes.measurements  # the workers skipped what the cancelled run still had queued
    assert len(fakes.sent) == 1


def test_the_pipeline_runs_without_torch():
    """Every scenario of this module, in a fresh interpreter that has not imported torch: the
    services, the bus and the archiver never import it (only the engines do)."""
    code = (
        "import sys, pytest\n"
        f"rc = pytest.main([{str(Path(__file__))!r}, '-q', '-p', 'no:cacheprovider', '-k', 'not without_torch'])\n"
        "print('TORCH', 'torch' in sys.modules, 'RC', int(rc))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2]
    )
    assert "TORCH False RC 0" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


def test_predict_measures_the_anchors_predicts_the_rest_and_checks_a_predicted_pick(app, fakes):
    """--predict: three anchors measured per family, the other sizes predicted with an interval;
    a pick that was predicted is measured before the run closes, and set beside its prediction."""
    fakes.billed_ms = 100.0  # measured sizes bill far more than predicted ones: the cheapest pick is a predicted size
    summary = run(app, request(app, memory=(512, 1024, 1769, 2048, 3538, 5120), predict=True))
    measured = {r["combo"]["memory_mb"] for r in summary["results"] if not r.get("predicted")}
    predicted = {r["combo"]["memory_mb"]: r for r in summary["results"] if r.get("predicted")}
    checks = summary["recommendation"]["checks"]
    assert (
        checks
        and all(c["measured"] for c in checks)
        and "cheapest" in {kind for c in checks for kind in c["picked_as"]}
    )
    checked = {int(c["combination"].split("/")[-1].removesuffix("MB")) for c in checks}
    assert checked <= {1024, 2048, 5120}
    assert measured == {512, 1769, 3538} | checked and set(predicted) == {1024, 2048, 5120} - checked
    assert sorted(m for _, m in fakes.measurements) == sorted(measured)  # each measured once, the checks included
    for row in predicted.values():
        low, high = row["interval"]["p50"]
        assert low < row["latency_ms"]["p50"] < high and row["cost"]["per_million_inferences_usd"] > 0
    assert {r["combo"]["memory_mb"] for r in summary["results"] if r.get("check")} == checked
    # re-ranked with the measurements: a checked size now bills what it measured, so it is no longer the cheapest
    assert summary["recommendation"]["cheapest"] not in {c["combination"] for c in checks}
    assert summary["status"] == "complete" and len(fakes.sent) == 1


def test_predict_with_too_few_sizes_is_refused():
    with pytest.raises(ValueError, match="predict measures up to 3 memory sizes"):
        RequestSubmitted(
            model=ModelRef(
                sha256="a" * 64, size_bytes=11, format="onnx", workload="image_classification", input_size=[2, 2]
            ),
            matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1769]),
            predict=True,
        )


def test_a_resubmitted_matrix_is_reused_in_a_few_events(app, fakes):
    """Everything stored: dedup sends the stored results in `CombosReused` events of at most
    REUSED_PER_EVENT each, not one event per combination, and the run closes complete."""
    from schemas.events import REUSED_PER_EVENT

    memory = tuple(range(1024, 1024 + 30 * 64, 64))  # 30 sizes x 2 optimizers x 1 batch = 60 combinations
    first = run(app, request(app, memory=memory[:16], optimizers=("base", "onnx")))
    second = run(app, request(app, memory=memory[:16], optimizers=("base", "onnx")))
    assert len(first["results"]) == len(second["results"]) == 32 and all(r["reused"] for r in second["results"])
    log = app.store.list_keys(keys.event_log_prefix(second["run_id"]))
    reused_events = [Envelope.parse(app.store.get_bytes(k)).payload for k in log if "-CombosReused-" in k]
    assert sum(len(e.results) for e in reused_events) == 32 and all(
        len(e.results) <= REUSED_PER_EVENT for e in reused_events
    )
    assert not any("-InferenceDone-" in k for k in log)
    # their ends are one object per event, and the summary's rows are the results dedup read
    outcomes = app.store.list_keys(keys.outcomes_prefix(second["run_id"]))
    assert len([k for k in outcomes if "/reused-" in k]) == len(reused_events) and keys.outcomes_in(outcomes) == 32
    first_rows = {r["combo_key"]: r["latency_ms"] for r in first["results"]}
    assert {r["combo_key"]: r["latency_ms"] for r in second["results"]} == first_rows


def test_a_reuse_keeps_the_documents_as_stored_and_the_summary_has_them_in_the_current_version(app, fakes):
    """Dedup's bundle holds each reused document as it was stored (validated, not written
    again); one of an older version (here: written before versioning) is upcast by the
    archiver, so the summary's rows are all of the current version."""
    from schemas.documents import MeasuredResult, ResultBundle

    first = run(app, request(app, memory=(1024, 1088)))
    (pack_key,) = app.store.list_keys("result-packs/")
    pack = json.loads(app.store.get_bytes(pack_key))
    for document in pack["results"].values():
        del document["document_version"]
    app.store.put_bytes(pack_key, json.dumps(pack).encode())
    second = run(app, request(app, memory=(1024, 1088)))
    bundled = [
        ResultBundle.read(app.store.get_bytes(k)).results
        for k in app.store.list_keys(f"runs/{second['run_id']}/reused/")
    ]
    assert [d for b in bundled for d in b.values()] == list(pack["results"].values())
    assert all(r["reused"] and r["document_version"] == MeasuredResult.VERSION for r in second["results"])
    assert {r["combo_key"]: r["latency_ms"] for r in second["results"]} == {
        r["combo_key"]: r["latency_ms"] for r in first["results"]
    }


def test_a_reuse_whose_bundle_is_lost_reads_each_result_and_an_old_batch_event_still_reads(app, fakes):
    """The bundle is an optimisation: without it (lost, or a v1 `CombosReused` without one)
    the archiver reads each result by its key; the run is the same."""
    from core.outcomes import arrived_outcomes
    from services.archiver.handlers import on_combos_reused

    first = run(app, request(app, memory=(1024, 1088, 1152)))
    second = run(app, request(app, memory=(1024, 1088, 1152)))
    arrived = arrived_outcomes(app.store, second["run_id"])
    assert len(arrived) == 3 and len(arrived.documents) == 3
    for key in app.store.list_keys(f"runs/{second['run_id']}/reused/"):
        app.store.put_bytes(key, b"not json")
    arrived = arrived_outcomes(app.store, second["run_id"])
    assert len(arrived) == 3 and not arrived.documents
    assert {k: arrived.result(arrived.outcome(k)).latency_ms.p50 for k in arrived.reused} == {
        r["combo_key"]: r["latency_ms"]["p50"] for r in first["results"]
    }
    stored = {r["combo_key"]: f"results/{r['combo_key']}/{first['run_id']}.json" for r in first["results"]}
    old = Envelope.parse(
        json.dumps(
            {
                "event_id": "e-old",
                "type": "CombosReused",
                "schema_version": 1,
                "run_id": "old-run",
                "time": "2026-01-01T00:00:00Z",
                "producer": "dedup",
                "payload": {"results": stored},
            }
        )
    )
    assert old.payload.bundle is None
    on_combos_reused(old, ArchiverDeps(store=app.store))
    arrived = arrived_outcomes(app.store, "old-run")
    assert {k: arrived.result(arrived.outcome(k)).run_id for k in stored} == {k: first["run_id"] for k in stored}


def test_a_dead_lettered_batch_of_reused_results_ends_its_run():
    from core.runtime import dead_letter_failure
    from schemas.events import CombosReused, RunDeadlineReached

    envelope = Envelope.wrap(CombosReused(results={"k1": "results/k1.json"}), run_id="r", producer="dedup")
    closing = dead_letter_failure(envelope, "boom")
    assert (
        isinstance(closing.payload, RunDeadlineReached)
        and "CombosReused dead-lettered after retries: boom" in closing.payload.reason
    )
