"""The in-process transport (the embedded default): one queue, delivered in order to the
service runners the routing table names. Failures behave as on SQS: a handler that raises is
retried, and after `max_receives` the event is dead-lettered, which fails its combination."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from datetime import UTC, datetime

import structlog

from core.routing import consumers
from core.runtime import ServiceRunner, dead_letter_failure
from schemas.events import Envelope

log = structlog.get_logger()


class InProcessBus:
    def __init__(self, max_receives: int = 3) -> None:
        self.runners: dict[str, ServiceRunner] = {}
        self.queue: deque[tuple[str, Envelope, int]] = deque()
        self.delayed: list[tuple[datetime, int, Envelope]] = []
        self._order = itertools.count()
        self.max_receives = max_receives
        self.dead_letters: list[tuple[str, Envelope, str]] = []
        self.on_dead_letter = None  # set by bootstrap: publishes the failure through the event log
        self.observers: list = []  # called with (queue name, envelope) before each delivery
        self._skipped_to: datetime | None = None

    def subscribe(self, queue_name: str, runner: ServiceRunner) -> None:
        self.runners[queue_name] = runner

    def publish(self, envelopes: list[Envelope]) -> None:
        for envelope in envelopes:
            for name in consumers(envelope):
                if name in self.runners:
                    self.queue.append((name, envelope, 1))
                else:
                    log.warning("no_consumer", queue=name, event_type=envelope.type, run_id=envelope.run_id)

    def publish_at(self, envelope: Envelope, when: datetime) -> None:
        heapq.heappush(self.delayed, (when, next(self._order), envelope))

    def now(self) -> datetime:
        """The bus's clock: real time, except that once idle it skips ahead to the next
        delayed event (nothing else can happen in between in one process)."""
        real = datetime.now(UTC)
        return max(real, self._skipped_to) if self._skipped_to else real

    def run_until_idle(self) -> None:
        """Deliver until nothing is queued. Delayed events are delivered once the queue is
        idle: in one process nothing else can arrive, so their time has effectively come."""
        while self.queue or self.delayed:
            if not self.queue:
                when, _, envelope = heapq.heappop(self.delayed)
                self._skipped_to = max(when, self._skipped_to or when)
                self.publish([envelope])
                continue
            name, envelope, receives = self.queue.popleft()
            for observe in self.observers:
                observe(name, envelope)
            try:
                self.runners[name].handle(envelope)
            except Exception as exc:  # like SQS: retry, then dead-letter
                log.exception(
                    "handler_failed", queue=name, event_type=envelope.type, run_id=envelope.run_id, receives=receives
                )
                if receives < self.max_receives:
                    self.queue.append((name, envelope, receives + 1))
                else:
                    self._dead_letter(name, envelope, f"{type(exc).__name__}: {exc}")

    def _dead_letter(self, queue_name: str, envelope: Envelope, reason: str) -> None:
        self.dead_letters.append((queue_name, envelope, reason))
        failure = dead_letter_failure(envelope, reason)
        if failure is not None:
            (self.on_dead_letter or self.publish)([failure])
