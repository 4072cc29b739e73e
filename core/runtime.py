"""What every service shares, whatever the transport: idempotent handling, the event log,
and turning a handler's returned payloads into envelopes.

A handler is `handler(event: Envelope, deps) -> list[Payload | Delayed]`: pure with respect to
transport; it reads and writes through the ports in `deps`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from core.ports import EventPublisher, ObjectStore
from schemas import keys
from schemas.events import ComboFailed, Envelope, FailureStage, Payload, RunDeadlineReached


@dataclass(frozen=True)
class Delayed:
    """A payload to deliver no earlier than `when` (e.g. the archiver's deadline)."""

    payload: Payload
    when: datetime


@dataclass(frozen=True)
class WithId:
    """A payload published under a given event id, whoever emits it: a run's one announcement
    (`RunArchived`) has one id whichever arrival announces it, so consumers see duplicates."""

    payload: Payload
    event_id: str


Handler = Callable[[Envelope, Any], list[Payload | Delayed | WithId]]


@dataclass
class Service:
    """A service: its name and one handler per event (payload class) it consumes."""

    name: str
    handlers: dict[type[Payload], Handler]
    deps: Any = None


def event_log_key(envelope: Envelope) -> str:
    """`runs/{run_id}/events/{seq}-{type}-{event_id}.json`: the log replay reads, in order."""
    seq = f"{int(envelope.time.timestamp() * 1_000_000):020d}"
    return keys.event_log_entry(envelope.run_id, seq, envelope.type, envelope.event_id)


class LoggedPublisher:
    """Keeps every published event in the run's event log, then hands it to the transport."""

    def __init__(self, store: ObjectStore, transport: EventPublisher) -> None:
        self.store = store
        self.transport = transport

    def publish(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            self.store.put_bytes(event_log_key(envelope), envelope.to_json().encode(), if_absent=True)
        if envelopes:
            self.transport.publish(envelopes)

    def publish_at(self, envelope: Envelope, when: datetime) -> None:
        self.transport.publish_at(envelope, when)


@dataclass
class ServiceRunner:
    """Runs one service's handlers, idempotent on the event id: an event already handled
    (its marker `processed/{service}/{event_id}` exists) changes nothing the second time.
    The marker is written after publishing, so a crash in between re-handles the event and
    re-publishes the same (deterministic) event ids, which consumers downstream drop."""

    service: Service
    store: ObjectStore
    publisher: LoggedPublisher
    log: Any = field(default_factory=lambda: structlog.get_logger())

    def marker_key(self, envelope: Envelope) -> str:
        return keys.processed_marker(self.service.name, envelope.event_id)

    def handle(self, envelope: Envelope) -> list[Envelope]:
        log = self.log.bind(
            service=self.service.name, run_id=envelope.run_id, event_id=envelope.event_id, event_type=envelope.type
        )
        combo_key = getattr(envelope.payload, "combo_key", None)
        if combo_key:
            log = log.bind(combo_key=combo_key)
        handler = self.service.handlers.get(type(envelope.payload))
        if handler is None:
            raise LookupError(f"{self.service.name} does not consume {envelope.type}")
        if self.store.exists(self.marker_key(envelope)):
            log.info("duplicate_event_skipped")
            return []
        started = time.perf_counter()
        outputs = handler(envelope, self.service.deps)
        emitted = [
            envelope.caused(o.payload if isinstance(o, Delayed | WithId) else o, producer=self.service.name, index=i)
            for i, o in enumerate(outputs)
        ]
        emitted = [
            e.model_copy(update={"event_id": o.event_id}) if isinstance(o, WithId) else e
            for e, o in zip(emitted, outputs, strict=True)
        ]
        now_events = [e for e, o in zip(emitted, outputs, strict=True) if not isinstance(o, Delayed)]
        self.publisher.publish(now_events)
        for envelope_out, output in zip(emitted, outputs, strict=True):
            if isinstance(output, Delayed):
                self.publisher.publish_at(envelope_out, output.when)
        self.store.put_bytes(self.marker_key(envelope), b"", if_absent=True)
        log.info("event_handled", emitted=[e.type for e in emitted], seconds=round(time.perf_counter() - started, 3))
        return emitted


def dead_letter_failure(envelope: Envelope, reason: str) -> Envelope | None:
    """What ends the work a dead-lettered event stood for, so its run still ends: the
    `ComboFailed` of its combination, or for an event of the whole run (its request, its
    plan, its deadline) a `RunDeadlineReached` that closes the run now with the reason.
    None for what needs no end (a failure report, an announcement, a closing that already
    carried a reason)."""
    payload = envelope.payload
    why = f"dead-lettered after retries: {reason[:2000]}"
    combo, key = getattr(payload, "combo", None), getattr(payload, "combo_key", None)
    if combo is not None and key is not None and envelope.type != "ComboFailed":
        # a refinement's (racing) ends the refinement: its quick figures stand
        refine = bool(getattr(payload, "refine", False))
        failed = ComboFailed(combo=combo, combo_key=key, stage=FailureStage.dead_letter, reason=why, refine=refine)
        return envelope.caused(failed, producer="dead-letter", index=0)
    request = {"RequestSubmitted": payload, "RunPlanned": getattr(payload, "request", None)}.get(envelope.type)
    if envelope.type in ("RequestSubmitted", "RunPlanned", "CombosReused") or (
        envelope.type == "RunDeadlineReached" and payload.reason is None
    ):
        if envelope.type == "RunDeadlineReached":
            request = payload.request
        closing = RunDeadlineReached(
            deadline=envelope.time, reason=f"{envelope.type} {why}", stage=FailureStage.dead_letter, request=request
        )
        return envelope.caused(closing, producer="dead-letter", index=0)
    return None
