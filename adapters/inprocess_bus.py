"""The in-process transport (the embedded default): the events of every service in one process,
delivered to the service runners the routing table names. Failures behave as on SQS: a handler
that raises is retried, and after `max_receives` the event is dead-lettered, which fails its
combination.

Delivery order (one event at a time: the process does one thing at once, on purpose):
- a later stage before an earlier one (`STAGE_RANK`): the bookkeeping services (dedup, the
  archiver, the notifier: milliseconds each) first, then measurements (inference), then
  conversions. So a combination flows from its conversion to its measurement and its outcome
  before the next conversion starts, in the order dedup emitted them (the most telling first,
  `core/racing.telling_order`), and a run's first answer does not wait for every conversion of
  the matrix (before: one FIFO queue ran every conversion, int8 calibration and TVM builds at
  every batch, before the first measurement). Refinements and profiles are measurements: they
  go before the conversions still queued.
- within a stage, runs take turns (one event of each run with work at that stage, round-robin),
  FIFO within a run: a run submitted while another is being measured is planned at once and its
  combinations alternate with the other's.
- a retried event goes to the back of its run's line at its stage.
- delayed events: a stage's work delayed by its handler (a conversion waiting for a lease or for
  the run's other engines' figures, `core/tuning_stakes.waits_for_others`) is delivered once its
  time has come, as SQS's `DelaySeconds` would, at its stage's rank; the archiver's (the run's
  deadline) waits for the bus to be idle: in one process a run still being worked on is not
  stuck, and its deadline closes only a run nothing moves any more. When only delayed events are
  left the bus's clock skips ahead to the next one (nothing else can happen in between).

The real path (EventBridge, one SQS queue per service, workers in parallel) has its own order:
each queue is roughly FIFO and the services run side by side; dedup's order of `ComboPending`
applies there too. Handlers never rely on any order (at-least-once: every event may come twice
or late), so this order changes when things happen, never what they produce.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, deque
from datetime import UTC, datetime

import structlog

from core.routing import consumers
from core.runtime import ServiceRunner, dead_letter_failure
from schemas.events import Envelope

log = structlog.get_logger()

# service (the queue name before "-{hardware}") -> its rank: lower is delivered first
STAGE_RANK = {"dedup": 0, "archiver": 0, "notifier": 0, "inference": 1, "converter": 2}
LAST_RANK = max(STAGE_RANK.values())


def stage_rank(queue_name: str) -> int:
    return STAGE_RANK.get(queue_name.split("-", 1)[0], LAST_RANK)


class Lanes:
    """The queued deliveries: per stage rank, per run (in turn), FIFO."""

    def __init__(self) -> None:
        self.ranks: dict[int, OrderedDict[str, deque[tuple[str, Envelope, int]]]] = {}
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def append(self, item: tuple[str, Envelope, int]) -> None:
        runs = self.ranks.setdefault(stage_rank(item[0]), OrderedDict())
        runs.setdefault(item[1].run_id, deque()).append(item)
        self.size += 1

    def popleft(self) -> tuple[str, Envelope, int]:
        """The next delivery: the lowest rank with work, the run whose turn it is there."""
        rank = min(r for r, runs in self.ranks.items() if runs)
        runs = self.ranks[rank]
        run_id, line = next(iter(runs.items()))
        item = line.popleft()
        del runs[run_id]
        if line:  # its next event waits for the other runs' turns
            runs[run_id] = line
        self.size -= 1
        return item


class InProcessBus:
    def __init__(self, max_receives: int = 3) -> None:
        self.runners: dict[str, ServiceRunner] = {}
        self.queue = Lanes()
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

    def _release_due(self) -> None:
        """Queue the delayed work (converter, inference) whose time has come; the archiver's
        delayed events wait for idleness."""
        if not self.delayed:
            return
        now, kept = self.now(), []
        while self.delayed and self.delayed[0][0] <= now:
            item = heapq.heappop(self.delayed)
            if all(stage_rank(name) > 0 for name in consumers(item[2])):
                self.publish([item[2]])
            else:
                kept.append(item)
        for item in kept:
            heapq.heappush(self.delayed, item)

    def run_until_idle(self) -> None:
        """Deliver until nothing is queued. Delayed events are delivered once the queue is
        idle (in one process nothing else can arrive, so their time has effectively come), or
        earlier, for a stage's delayed work, when their time has come."""
        while self.queue or self.delayed:
            self._release_due()
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
