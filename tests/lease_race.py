"""Racing takers of one lease (`core/lease.py`), for the lease tests on each store."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from core.lease import Lease


class Clock:
    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at


class BothReadFirst:
    """The store, but each racer's first read of the lease waits until every racer has read it:
    each then writes from the same version, the race the conditional write must settle."""

    def __init__(self, store, racers: int) -> None:
        self.store = store
        self.barrier = threading.Barrier(racers, timeout=10)
        self.seen = threading.local()

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        found = self.store.get_versioned(key)
        if not getattr(self.seen, "read", False):
            self.seen.read = True
            self.barrier.wait()
        return found

    def compare_and_put(self, key: str, data: bytes, *, version: str | None) -> str | None:
        return self.store.compare_and_put(key, data, version=version)


def race(leases: list[Lease]) -> list[bool]:
    won: list[bool | None] = [None] * len(leases)

    def run(index: int) -> None:
        won[index] = leases[index].take()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(leases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert None not in won, "a taker never finished"
    return won


def assert_one_taker_of_an_expired_lease_wins(store, key: str, racers: int) -> None:
    """`racers` takers of `key`'s expired lease, each reading it before any writes: exactly one
    wins, its holder is the one stored, and only its renewals succeed."""
    clock = Clock()
    assert Lease(store, key, "dead", 60, now=clock).take()
    clock.at += timedelta(seconds=61)
    racing = BothReadFirst(store, racers)
    takers = [Lease(racing, key, f"taker-{index}", 60, now=clock) for index in range(racers)]
    won = race(takers)
    assert sum(won) == 1
    winner = takers[won.index(True)]
    assert f'"holder": "{winner.holder}"' in store.get_bytes(key).decode()
    assert winner.renew()  # the winner's version is the stored one
    assert not any(taker.renew() for taker in takers if taker is not winner)
