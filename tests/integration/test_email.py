"""The notifier's email through LocalStack's SES (v1), read back from `GET /_aws/ses`."""

from __future__ import annotations

import json
import os
import urllib.request
import uuid

import boto3
import pytest

from adapters.local_store import LocalFolderStore
from adapters.ses import SesMailer
from schemas.events import Envelope, RunArchived, RunStatus
from services.notifier.handlers import NotifierDeps, on_run_archived
from tests.conftest import archived_summary, measured_result

pytestmark = pytest.mark.localstack


def sent_mail(sender: str) -> list[dict]:
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    with urllib.request.urlopen(f"{endpoint}/_aws/ses?email={sender}", timeout=10) as response:
        return json.load(response)["messages"]


def summary(run_id: str, status: str) -> dict:
    results = (
        []
        if status == "failed"
        else [
            measured_result(
                "intel/onnx/b4/3538MB", p99=4.75, cost=0.0777, agreement=0.998, cold_start_ms=640.0, peak_rss_mb=260.0
            )
        ]
    )
    failure = {"label": "arm/tvm/b4/3538MB", "stage": "converter", "reason": "TVM build failed: no such target"}
    return archived_summary(run_id, status, results, [failure])


@pytest.fixture
def mailer():
    sender = f"ayci-{uuid.uuid4().hex[:8]}@example.com"
    boto3.client("ses").verify_email_identity(EmailAddress=sender)
    return SesMailer(sender)


@pytest.mark.parametrize("status", ["partial", "failed"])
def test_one_email_per_archived_run_with_the_table_and_failures(tmp_path, mailer, status):
    store = LocalFolderStore(tmp_path)
    run_id = str(uuid.uuid4())
    store.put_bytes(f"runs/{run_id}/summary.json", json.dumps(summary(run_id, status)).encode())
    archived = RunArchived(
        status=RunStatus(status),
        summary_key=f"runs/{run_id}/summary.json",
        succeeded=0 if status == "failed" else 1,
        failed=1,
        email="user@example.com",
    )
    event = Envelope.wrap(archived, run_id=run_id, producer="archiver")
    deps = NotifierDeps(store=store, mailer=mailer, results_url="https://ayci.example")
    on_run_archived(event, deps)
    on_run_archived(event, deps)  # redelivered: no second email

    (message,) = sent_mail(mailer.sender)
    assert message["Destination"]["ToAddresses"] == ["user@example.com"]
    assert message["Subject"].startswith(f"AYCI run {run_id[:8]}: {status}")
    text, html = message["Body"]["text_part"], message["Body"]["html_part"]
    link = f"https://ayci.example/runs/{run_id}/results"
    for part in (text, html):
        assert link in part
        assert "arm/tvm/b4/3538MB" in part and "TVM build failed: no such target" in part
        if status == "partial":
            assert "intel/onnx/b4/3538MB" in part and "4.75" in part and "0.0777" in part and "0.9980" in part
        else:
            assert "none qualifies" in part
    assert "<table" in html
