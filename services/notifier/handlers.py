"""Notifier: one email per archived run, whatever its status (a failed run gets one too).

The email (plain text and HTML) has the run's table (the same rows as the CLI, the CSV and
the page: `summary_rows`), the recommendation, each failed combination with its reason, and
the link to the results.

Once per run: before sending, the notifier claims the run with a conditional write of
`runs/{run_id}/email.json`, so two deliveries of `RunArchived` (SQS delivers at least once,
possibly to two workers at a time) send one email. If sending fails, the claim is marked
failed and the error raised, so the redelivery takes the claim over and tries again. A worker
that dies in the middle of sending leaves the claim `sending`: no second email is risked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from core.ports import Mailer, ObjectStore
from report import email_message
from schemas import keys
from schemas.documents import RunSummary
from schemas.events import Envelope, Payload, RunArchived

log = structlog.get_logger()


@dataclass
class NotifierDeps:
    store: ObjectStore
    mailer: Mailer | None
    results_url: str = "http://127.0.0.1:8000"


def _claim(store: ObjectStore, run_id: str) -> bool:
    """True if this worker may send the run's email now."""
    record = {"state": "sending", "at": datetime.now(UTC).isoformat()}
    if store.put_bytes(keys.email(run_id), json.dumps(record).encode(), if_absent=True):
        return True
    previous = json.loads(store.get_bytes(keys.email(run_id)))
    if previous.get("state") == "failed":  # an earlier attempt failed: take it over
        store.put_bytes(keys.email(run_id), json.dumps(record).encode())
        return True
    return False


def on_run_archived(event: Envelope, deps: NotifierDeps) -> list[Payload]:
    archived: RunArchived = event.payload
    if not archived.email or deps.mailer is None:
        return []
    if not _claim(deps.store, event.run_id):
        log.info("email_already_sent", run_id=event.run_id)
        return []
    summary = RunSummary.read(deps.store.get_bytes(archived.summary_key)).to_dict()
    email = email_message(summary, deps.results_url)
    try:
        message_id = deps.mailer.send(to=archived.email, **email)
    except Exception as exc:
        deps.store.put_bytes(
            keys.email(event.run_id),
            json.dumps({"state": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}).encode(),
        )
        raise
    deps.store.put_bytes(
        keys.email(event.run_id), json.dumps({"state": "sent", "message_id": message_id, "to": archived.email}).encode()
    )
    log.info("email_sent", run_id=event.run_id, message_id=message_id)
    return []


HANDLERS = {RunArchived: on_run_archived}
