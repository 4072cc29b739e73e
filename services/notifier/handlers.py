"""Notifier: one email per archived run (idempotent on the run id)."""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from ayci.ports import Mailer, ObjectStore
from schemas.events import Envelope, Payload, RunArchived

log = structlog.get_logger()


@dataclass
class NotifierDeps:
    store: ObjectStore
    mailer: Mailer | None
    results_url: str = "http://127.0.0.1:8000"


def sent_key(run_id: str) -> str:
    return f"runs/{run_id}/email-sent.json"


def on_run_archived(event: Envelope, deps: NotifierDeps) -> list[Payload]:
    archived: RunArchived = event.payload
    if not archived.email or deps.mailer is None:
        return []
    if not deps.store.put_bytes(sent_key(event.run_id), b"{}", if_absent=True):
        return []  # already sent for this run
    subject = f"AYCI run {event.run_id[:8]}: {archived.status.value}"
    lines = [f"Run {event.run_id} is {archived.status.value}: {archived.succeeded} measured, {archived.failed} failed."]
    lines += [f"- {label}: {reason}" for label, reason in archived.failures.items()]
    lines.append(f"Results: {deps.results_url}/runs/{event.run_id}/results")
    text = "\n".join(lines)
    html = "<p>" + "</p><p>".join(lines) + "</p>"
    message_id = deps.mailer.send(to=archived.email, subject=subject, text=text, html=html)
    log.info("email_sent", run_id=event.run_id, message_id=message_id)
    return []


HANDLERS = {"RunArchived": on_run_archived}
