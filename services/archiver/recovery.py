"""A restart loses no run (the embedded default, `python -m ayci serve`).

The in-process bus keeps its queue and its delayed events (deadlines, retries) in memory, so a
server killed mid-run would leave the run `running` for ever (its deadline never fires) and
counting against its owner's runs in flight. At start, `recover` re-drives every run from what
is stored:

- a run with no summary: each event of its log (`runs/{id}/events/`) that a consumer has not
  handled (no `processed/{service}/{event id}` marker) is published again under its own id;
  for each combination with no stored outcome, the last event of its log (its frontier) is
  published again, under its own id if unhandled, else (it was handled and its follow-up was
  only in memory: a delayed retry) under an id derived from it; and its deadline is armed again
  at its original time (or now, if past). Consumers are idempotent on the event id, so what was
  already handled changes nothing.
- a run with a summary and no announcement record: announced, under the run's one id.

On AWS nothing is in memory (SQS keeps the queue and the delayed messages): this is for the
embedded default only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import structlog

from core.ports import NotFound, ObjectStore
from core.results import stored_plan
from core.routing import consumers
from core.runtime import LoggedPublisher
from core.topology import SERVICES
from schemas import keys
from schemas.events import Envelope, RunDeadlineReached, SchemaError
from services.archiver.handlers import announce_if_due

log = structlog.get_logger()

SERVICE_OF_QUEUE = {queue: spec.name for spec in SERVICES for queue in spec.queues}


@dataclass
class Recovered:
    """What `recover` found and did."""

    runs: list[str] = field(default_factory=list)  # runs re-driven
    events: int = 0  # events published again
    announced: list[str] = field(default_factory=list)  # archived runs announced again


def recover(store: ObjectStore, publisher: LoggedPublisher, now: datetime | None = None) -> Recovered:
    """Re-drive every stored run left unfinished (or unannounced) by a previous process."""
    now = now or datetime.now(UTC)
    found = Recovered()
    run_ids = sorted({key.split("/")[1] for key in store.list_keys("runs/") if key.endswith("/run.json")})
    for run_id in run_ids:
        try:
            record = json.loads(store.get_bytes(keys.run_record(run_id)))
        except (NotFound, ValueError):
            continue
        if record.get("not_submitted"):
            continue
        if store.exists(keys.summary(run_id)):
            announcement = announce_if_due(store, run_id)
            if announcement is not None:
                publisher.publish(
                    [
                        Envelope.wrap(
                            announcement.payload, run_id=run_id, producer="archiver", event_id=announcement.event_id
                        )
                    ]
                )
                found.announced.append(run_id)
            continue
        events = _redrive(store, publisher, run_id, now)
        found.runs.append(run_id)
        found.events += events
    if found.runs or found.announced:
        log.info("runs_recovered", runs=found.runs, events=found.events, announced=found.announced)
    return found


def _handled(store: ObjectStore, envelope: Envelope) -> bool:
    return all(
        store.exists(keys.processed_marker(SERVICE_OF_QUEUE.get(queue, queue), envelope.event_id))
        for queue in consumers(envelope)
    )


def _redrive(store: ObjectStore, publisher: LoggedPublisher, run_id: str, now: datetime) -> int:
    logged: list[Envelope] = []
    for key in store.list_keys(keys.event_log_prefix(run_id)):
        try:
            logged.append(Envelope.parse(store.get_bytes(key)))
        except (NotFound, SchemaError) as exc:
            log.warning("recovery_unreadable_event", run_id=run_id, key=key, reason=str(exc))
    ended = {key.rsplit("/", 1)[-1].removesuffix(".json") for key in store.list_keys(keys.outcomes_prefix(run_id))}
    again: list[Envelope] = []
    frontier: dict[str, Envelope] = {}  # combination key -> its last logged event
    for envelope in logged:
        combo_key = getattr(envelope.payload, "combo_key", None)
        if envelope.type == "ProfileRequested":
            continue
        if combo_key:
            frontier[combo_key] = envelope
        elif envelope.type != "RunArchived" and not _handled(store, envelope):
            again.append(envelope)
    for combo_key, envelope in frontier.items():
        if combo_key in ended:
            continue
        again.append(
            envelope
            if not _handled(store, envelope)
            else envelope.caused(envelope.payload, producer="restart", index=0)
        )
    publisher.publish(again)
    plan = stored_plan(store, run_id)  # None: its RunPlanned is handled again above, and arms the deadline
    if plan is not None:
        deadline = Envelope.wrap(RunDeadlineReached(deadline=plan.deadline), run_id=run_id, producer="restart")
        publisher.publish_at(deadline, max(plan.deadline, now))
    log.info(
        "run_redriven",
        run_id=run_id,
        events=[e.type for e in again],
        deadline=plan.deadline.isoformat() if plan else None,
    )
    return len(again)
