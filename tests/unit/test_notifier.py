"""The notifier's email: content, once per run, a retry after a failed send."""

from __future__ import annotations

import json

import pytest

from adapters.local_store import LocalFolderStore
from report import email_message as compose
from schemas import keys
from schemas.events import Envelope, RunArchived, RunStatus
from services.notifier.handlers import NotifierDeps, on_run_archived
from tests.conftest import archived_summary, measured_result

RUN_ID = "6f1c1d2e-0000-4000-8000-000000000001"


def summary(status="partial") -> dict:
    results = (
        []
        if status == "failed"
        else [measured_result("intel/onnx/b1/1769MB", p99=2.75, cost=0.1234, cold_start_ms=812.0, peak_rss_mb=222.5)]
    )
    failure = {"label": "intel/base/b1/128MB", "stage": "inference", "reason": "out of memory at 128 MB (peak 400 MB)"}
    return archived_summary(RUN_ID, status, results, [failure], input_size=(32, 32))


class FakeMailer:
    def __init__(self, fail_times: int = 0) -> None:
        self.sent, self.fail_times = [], fail_times

    def send(self, *, to, subject, text, html) -> str:
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("SES is unreachable")
        self.sent.append({"to": to, "subject": subject, "text": text, "html": html})
        return f"msg-{len(self.sent)}"


@pytest.fixture
def store(tmp_path):
    return LocalFolderStore(tmp_path)


def archived_event(store, status="partial", email="user@example.com") -> Envelope:
    store.put_bytes(f"runs/{RUN_ID}/summary.json", json.dumps(summary(status)).encode())
    payload = RunArchived(
        status=RunStatus(status),
        summary_key=f"runs/{RUN_ID}/summary.json",
        succeeded=0 if status == "failed" else 1,
        failed=1,
        failures={"intel/base/b1/128MB": "inference: out of memory"},
        email=email,
    )
    return Envelope.wrap(payload, run_id=RUN_ID, producer="archiver")


def test_the_email_has_the_table_recommendation_failures_and_link():
    email = compose(summary(), "http://ayci.example/")
    assert email["subject"] == f"AYCI run {RUN_ID[:8]}: partial, fastest intel/onnx/b1/1769MB"
    for part in (email["text"], email["html"]):
        assert "fastest" in part and "intel/onnx/b1/1769MB" in part
        assert (
            "2.75" in part and "0.1234" in part and "812.0" in part
        )  # p99, cost, cold start, as the table formats them
        assert "intel/base/b1/128MB" in part and "out of memory at 128 MB (peak 400 MB)" in part
        assert f"http://ayci.example/runs/{RUN_ID}/results" in part and f"http://ayci.example/#run={RUN_ID}" in part
    assert "p99 ms" in email["text"] and "<table" in email["html"] and "<th" in email["html"]


def test_a_failed_run_gets_an_email_too(store):
    mailer = FakeMailer()
    on_run_archived(archived_event(store, "failed"), NotifierDeps(store=store, mailer=mailer))
    (sent,) = mailer.sent
    assert "failed" in sent["subject"] and "none qualifies" in sent["text"] and "out of memory" in sent["text"]


def test_once_per_run_even_when_delivered_twice(store):
    mailer = FakeMailer()
    deps = NotifierDeps(store=store, mailer=mailer, results_url="http://x")
    event = archived_event(store)
    on_run_archived(event, deps)
    on_run_archived(event, deps)
    on_run_archived(
        Envelope.wrap(event.payload, run_id=RUN_ID, producer="archiver"), deps
    )  # another event id, same run
    assert len(mailer.sent) == 1 and mailer.sent[0]["to"] == "user@example.com"
    assert json.loads(store.get_bytes(keys.email(RUN_ID))) == {
        "state": "sent",
        "message_id": "msg-1",
        "to": "user@example.com",
    }


def test_a_failed_send_is_retried_by_the_redelivery(store):
    mailer = FakeMailer(fail_times=1)
    deps = NotifierDeps(store=store, mailer=mailer)
    event = archived_event(store)
    with pytest.raises(ConnectionError):
        on_run_archived(event, deps)
    assert json.loads(store.get_bytes(keys.email(RUN_ID)))["state"] == "failed"
    on_run_archived(event, deps)
    assert len(mailer.sent) == 1


def test_no_address_no_email(store):
    mailer = FakeMailer()
    on_run_archived(archived_event(store, email=None), NotifierDeps(store=store, mailer=mailer))
    assert mailer.sent == []
    # the announcement is recorded all the same (the archiver does not announce it again)
    assert json.loads(store.get_bytes(keys.email(RUN_ID))) == {
        "state": "not_sent",
        "reason": "the request names no address",
    }


def test_a_failing_composition_claims_nothing_and_the_retry_sends_once(store, monkeypatch):
    """Composing the email (which may simulate traffic) fails: nothing is claimed, so the
    redelivery composes again and sends, exactly once."""
    import services.notifier.handlers as notifier

    mailer = FakeMailer()
    deps = NotifierDeps(store=store, mailer=mailer)
    event = archived_event(store)

    def broken(summary, url):
        raise MemoryError("the traffic simulation did not fit")

    monkeypatch.setattr(notifier, "email_message", broken)
    with pytest.raises(MemoryError):
        on_run_archived(event, deps)
    assert not store.exists(keys.email(RUN_ID)) and mailer.sent == []
    monkeypatch.setattr(notifier, "email_message", compose)
    on_run_archived(event, deps)
    on_run_archived(event, deps)
    assert len(mailer.sent) == 1
    assert json.loads(store.get_bytes(keys.email(RUN_ID)))["state"] == "sent"


def test_a_released_claim_is_taken_over_by_one_of_two_retries(store):
    """After a failed send, two redeliveries race for the failed record: one takes it over."""
    from services.notifier.handlers import _claim

    mailer = FakeMailer(fail_times=1)
    deps = NotifierDeps(store=store, mailer=mailer)
    event = archived_event(store)
    with pytest.raises(ConnectionError):
        on_run_archived(event, deps)
    record = json.loads(store.get_bytes(keys.email(RUN_ID)))
    assert record["state"] == "failed" and "SES is unreachable" in record["error"]
    taken = [_claim(store, RUN_ID), _claim(store, RUN_ID)]
    assert sum(t is not None for t in taken) == 1


def test_the_email_prices_the_pareto_front_under_the_requests_traffic():
    from report import email_message

    result = {
        "combo": {"hardware": "intel", "optimizer": "onnx", "batch_size": 1, "memory_mb": 1769},
        "latency_ms": {"p50": 10.0, "p90": 11.0, "p99": 13.0, "min": 9.0, "max": 15.0},
        "cold_start_ms": {"total": 400.0, "first_inference": 12.0},
        "peak_rss_mb": 150.0,
        "agreement": {"score": 1.0, "metric": "top1"},
        "confined": True,
        "cost": {"per_million_inferences_usd": 0.4, "cold_start_usd": 1e-5, "price_region": "us-east-1"},
    }
    summary = {
        "run_id": "r" * 36,
        "status": "complete",
        "archived_at": "2026-01-01T00:00:00+00:00",
        "closed_at_deadline": False,
        "results": [result],
        "failures": [],
        "model": {
            "sha256": "ab" * 32,
            "size_bytes": 1000,
            "format": "pt2",
            "workload": "image_classification",
            "input_size": [32, 32],
        },
        "request": {
            "traffic": {"rps": 0.5, "pattern": "spiky", "idle_timeout_s": 600, "duration_s": 86400},
            "slo_p99_ms": None,
        },
        "recommendation": {"fastest": "intel/onnx/b1/1769MB", "pareto": ["intel/onnx/b1/1769MB"]},
    }
    message = email_message(summary, "http://x")
    assert (
        "Under your traffic (0.5 req/s, spiky" in message["text"]
        and "intel/onnx/b1/1769MB on demand: cold starts" in message["text"]
    )
    assert "provisioned" in message["text"] and "Under your traffic" in message["html"]
    assert "Under your traffic" not in email_message({**summary, "request": {}}, "http://x")["text"]
