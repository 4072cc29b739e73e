"""Per-owner limits (runs in flight, combinations per UTC day), reserved before a run starts.

Each owner has one reservation document, `owners/{owner}/limits.json`: the runs it has in flight
(run id -> when reserved, how many combinations, on which day) and the combinations reserved
today. A submission reads it, checks the limits, adds its run and writes it back with a
compare-and-put on the version it read (`ObjectStore.compare_and_put`: S3's `If-Match`, or
`If-None-Match: *` for the first): of two submissions that read the same version exactly one
writes, the other reads again and checks again. So concurrent submissions never pass a limit
together, and a submission that loses the race never starts a run.

A reservation ends when its run ends: a run with a summary (archived: finished, failed at its
deadline or cancelled) or withdrawn (the bus did not take it) is dropped from the document the
next time it is written, so nothing has to decrement a count when a run ends. A submission that
fails before its run is recorded gives its reservation back (`release`). A reservation whose run
was never recorded (its submitter died between reserving and recording) lapses after
`UNRECORDED_LAPSE`; one older than `IN_FLIGHT_AT_MOST` lapses whatever its run (no run outlives
a day's deadline).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog

from core.ports import NotFound, ObjectStore
from schemas import keys
from schemas.documents import RunRecord

log = structlog.get_logger()

UNRECORDED_LAPSE = timedelta(minutes=10)
IN_FLIGHT_AT_MOST = timedelta(days=2)
ATTEMPTS = 200  # compare-and-put rounds before giving up (each round, one of the racing writers wins)


def reservation_key(owner: str) -> str:
    return keys.owner_limits(owner)


@dataclass(frozen=True)
class OwnerLimits:
    max_runs_in_flight: int
    max_combinations_per_day: int


class LimitReached(Exception):
    """The submission would pass a limit: `detail` says which, `retry_after_s` when to try again."""

    def __init__(self, detail: str, retry_after_s: int) -> None:
        super().__init__(detail)
        self.detail, self.retry_after_s = detail, retry_after_s


class ReservationContended(Exception):
    """Too many writers raced for the owner's reservation document: try again shortly."""


@dataclass
class Reservations:
    """The owner's reservation document as read."""

    day: str
    combinations: int = 0
    runs: dict[str, dict] = field(default_factory=dict)  # run id -> {"at", "combinations", "day"}
    revision: int = 0  # written every time: two writes never leave the same bytes (no ABA on content versions)
    ended: dict[str, dict] = field(default_factory=dict)  # runs dropped on this read (not written)

    @classmethod
    def read(cls, data: bytes) -> Reservations:
        body = json.loads(data)
        return cls(
            day=body["day"], combinations=int(body["combinations"]), runs=dict(body["runs"]), revision=body["revision"]
        )

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"day": self.day, "combinations": self.combinations, "runs": self.runs, "revision": self.revision},
            sort_keys=True,
        ).encode()


def _seeded(store: ObjectStore, owner: str, now: datetime) -> Reservations:
    """The first document of an owner: the runs counted before reservations existed (the
    per-day markers `count_run` writes), so an upgrade forgets no run in flight."""
    today, yesterday = now.date().isoformat(), (now - timedelta(days=1)).date().isoformat()
    seeded = Reservations(day=today)
    for day in (yesterday, today):
        for key in store.list_keys(keys.owner_day_prefix(owner, day)):
            try:
                combinations = int(store.get_bytes(key) or b"0")
            except (NotFound, ValueError):
                continue
            run_id = key.rsplit("/", 1)[-1]
            seeded.runs[run_id] = {"at": now.isoformat(), "combinations": combinations, "day": day}
            if day == today:
                seeded.combinations += combinations
    return seeded


def _ended(store: ObjectStore, run_id: str, reserved: dict, now: datetime) -> bool:
    """Whether a reservation no longer counts: its run was archived or withdrawn, or it lapsed."""
    at = datetime.fromisoformat(reserved["at"])
    if now - at > IN_FLIGHT_AT_MOST or store.exists(keys.summary(run_id)):
        return True
    try:
        record = RunRecord.read(store.get_bytes(keys.run_record(run_id)))
    except NotFound:
        return now - at > UNRECORDED_LAPSE
    except Exception:  # an unreadable record is no run in flight
        return True
    return record.owner is None  # withdrawn: never started


def _update(store: ObjectStore, owner: str, change, now: datetime):
    """Read the owner's document, apply `change` (which may raise, or return a value), and write
    it back only if nobody wrote it meanwhile; read and apply again until one write wins."""
    key = reservation_key(owner)
    for attempt in range(ATTEMPTS):
        try:
            data, version = store.get_versioned(key)
            current = Reservations.read(data)
        except NotFound:
            current, version = _seeded(store, owner, now), None
        today = now.date().isoformat()
        if current.day != today:
            current.day, current.combinations = today, 0
        current.ended = {r: v for r, v in current.runs.items() if _ended(store, r, v, now)}
        current.runs = {r: v for r, v in current.runs.items() if r not in current.ended}
        answer = change(current)
        current.revision += 1
        if store.compare_and_put(key, current.to_bytes(), version=version) is not None:
            return answer
        time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))
    log.warning("owner_reservation_contended", owner=owner, attempts=ATTEMPTS)
    raise ReservationContended(f"too many submissions at once for {owner}: try again")


def reserve(
    store: ObjectStore, owner: str, run_id: str, combinations: int, limits: OwnerLimits, now: datetime | None = None
) -> None:
    """Reserve a run of `combinations` for `owner` within `limits`, before anything of it is
    written or published; `LimitReached` (nothing reserved) if it would pass one."""
    now = now or datetime.now(UTC)

    def add(current: Reservations) -> None:
        if len(current.runs) >= limits.max_runs_in_flight:
            raise LimitReached(
                f"you have {len(current.runs)} runs in flight, the most allowed: wait for one to end (or cancel one)",
                60,
            )
        if current.combinations + combinations > limits.max_combinations_per_day:
            midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
            raise LimitReached(
                f"{current.combinations} combinations submitted today and {combinations} more would pass your daily "
                f"{limits.max_combinations_per_day}",
                int((midnight - now).total_seconds()) + 1,
            )
        current.runs[run_id] = {"at": now.isoformat(), "combinations": combinations, "day": current.day}
        current.combinations += combinations

    _update(store, owner, add, now)
    log.info("owner_reserved", owner=owner, run_id=run_id, combinations=combinations)


def charge(
    store: ObjectStore, owner: str, combinations: int, limits: OwnerLimits, what: str, now: datetime | None = None
) -> None:
    """Count `combinations` of work that is no run (a profiled pass) in the owner's daily budget;
    `LimitReached` if it would pass it."""
    now = now or datetime.now(UTC)

    def add(current: Reservations) -> None:
        if current.combinations + combinations > limits.max_combinations_per_day:
            midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
            raise LimitReached(
                f"{current.combinations} combinations submitted today and {what} would pass your daily "
                f"{limits.max_combinations_per_day}",
                int((midnight - now).total_seconds()) + 1,
            )
        current.combinations += combinations

    _update(store, owner, add, now)


def release(store: ObjectStore, owner: str, run_id: str, now: datetime | None = None) -> None:
    """Give back the reservation of a run that did not start (its combinations too, if reserved today)."""
    now = now or datetime.now(UTC)

    def drop(current: Reservations) -> None:
        reserved = current.runs.pop(run_id, None) or current.ended.get(run_id)  # withdrawn already
        if reserved and reserved.get("day") == current.day:
            current.combinations = max(0, current.combinations - int(reserved["combinations"]))

    _update(store, owner, drop, now)
    log.info("owner_reservation_released", owner=owner, run_id=run_id)


def usage(store: ObjectStore, owner: str, now: datetime | None = None) -> tuple[int, int]:
    """(runs in flight, combinations reserved today) as the owner's document says (read only)."""
    now = now or datetime.now(UTC)
    try:
        current = Reservations.read(store.get_bytes(reservation_key(owner)))
    except NotFound:
        current = _seeded(store, owner, now)
    today = now.date().isoformat()
    live = [r for r, v in current.runs.items() if not _ended(store, r, v, now)]
    return len(live), current.combinations if current.day == today else 0
