"""Notifier: one email per archived run, whatever its status (a failed run gets one too).

The email (plain text and HTML) has the run's table (the same rows as the CLI, the CSV and
the page: `summary_rows`), the recommendation, each failed combination with its reason, and
the link to the results.

Once per run, in this order: compose the email (it reads the summary and may simulate the
request's traffic: if that fails, nothing is claimed and the redelivery composes again), claim
the run with a conditional write of `runs/{run_id}/email.json` (so two deliveries of
`RunArchived`, at least once, possibly to two workers at a time, send one email), send. If
sending fails, the claim is released (conditionally, to a `failed` record naming the error) and
the error raised, so a redelivery takes it over (conditionally: one taker wins) and sends. A
worker that dies in the middle of sending leaves the claim `sending`: no second email is risked.

`email.json` is also the run's announcement record (`services/archiver`): a run without one
(or with only a failed attempt) is announced again, so the notifier records every announcement
it handles, including those it sends no email for (no address, no mailer).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from core.ports import Mailer, NotFound, ObjectStore
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


def _record(**fields) -> bytes:
    return json.dumps(fields).encode()


def _claim(store: ObjectStore, run_id: str) -> str | None:
    """The version of this worker's claim if it may send the run's email now; None if another
    worker sends (or sent) it. A failed attempt's record is taken over conditionally."""
    key = keys.email(run_id)
    claim = _record(state="sending", at=datetime.now(UTC).isoformat())
    version = store.compare_and_put(key, claim, version=None)
    if version is not None:
        return version
    try:
        previous, previous_version = store.get_versioned(key)
    except NotFound:  # released and removed in between: claim it afresh
        return store.compare_and_put(key, claim, version=None)
    try:
        state = json.loads(previous).get("state")
    except (ValueError, AttributeError):
        state = None
    if state == "failed":  # an earlier attempt failed: take it over (of two takers, one wins)
        return store.compare_and_put(key, claim, version=previous_version)
    return None


def _release(store: ObjectStore, run_id: str, claim: str, exc: Exception) -> None:
    """Give the claim back after a failed send, naming the error, unless another worker has
    taken it over since (then its record stands)."""
    failed = _record(state="failed", error=f"{type(exc).__name__}: {exc}"[:500], at=datetime.now(UTC).isoformat())
    if store.compare_and_put(keys.email(run_id), failed, version=claim) is None:
        log.warning("email_claim_taken_over", run_id=run_id)


def on_run_archived(event: Envelope, deps: NotifierDeps) -> list[Payload]:
    archived: RunArchived = event.payload
    if not archived.email or deps.mailer is None:
        why = "the request names no address" if not archived.email else "no mailer is configured"
        deps.store.put_bytes(keys.email(event.run_id), _record(state="not_sent", reason=why), if_absent=True)
        log.info("email_not_sent", run_id=event.run_id, reason=why)
        return []
    summary = RunSummary.read(deps.store.get_bytes(archived.summary_key))
    email = email_message(summary, deps.results_url)  # composed before claiming: a failure here claims nothing
    claim = _claim(deps.store, event.run_id)
    if claim is None:
        log.info("email_already_sent", run_id=event.run_id)
        return []
    try:
        message_id = deps.mailer.send(to=archived.email, **email)
    except Exception as exc:
        _release(deps.store, event.run_id, claim, exc)
        raise
    deps.store.put_bytes(keys.email(event.run_id), _record(state="sent", message_id=message_id, to=archived.email))
    log.info("email_sent", run_id=event.run_id, message_id=message_id)
    return []


HANDLERS = {RunArchived: on_run_archived}
