"""The lease on conditional writes (`core/lease.py`) on the memory and folder stores: held, waited
for, expired, released; and two workers that both find the same lease expired race to take it
over, both having read it before either writes: exactly one wins (a takeover by an unconditional
put would let both win)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from adapters.local_store import LocalFolderStore
from adapters.memory_store import MemoryStore
from core.lease import Lease
from tests.lease_race import BothReadFirst, Clock, assert_one_taker_of_an_expired_lease_wins, race

KEY = "leases/artifact.json"


@pytest.fixture(params=["memory", "folder"])
def store(request, tmp_path):
    return MemoryStore() if request.param == "memory" else LocalFolderStore(tmp_path / "store")


def test_a_lease_is_held_waited_for_expires_and_is_released(store):
    clock = Clock()
    first = Lease(store, KEY, "first", 60, now=clock)
    other = Lease(store, KEY, "other", 60, now=clock)
    assert first.take() and first.held
    assert not other.take()
    assert first.take()  # its own again (a redelivered message)
    clock.at += timedelta(seconds=59)
    assert not other.take()
    clock.at += timedelta(seconds=2)  # the first holder died: its lease expired
    assert other.take()
    assert not first.renew() and not first.held
    first.release()  # no longer its own: nothing changes
    assert not Lease(store, KEY, "third", 60, now=clock).take()
    other.release()
    assert Lease(store, KEY, "third", 60, now=clock).take()


@pytest.mark.parametrize("racers", [2, 4])
def test_of_the_takers_of_an_expired_lease_exactly_one_wins(store, racers):
    assert_one_taker_of_an_expired_lease_wins(store, KEY, racers)


def test_of_the_takers_of_a_released_lease_exactly_one_wins(store):
    clock = Clock()
    done = Lease(store, KEY, "done", 60, now=clock)
    assert done.take()
    done.release()
    racing = BothReadFirst(store, 2)
    assert sorted(race([Lease(racing, KEY, name, 60, now=clock) for name in ("a", "b")])) == [False, True]


def test_of_the_creators_of_a_new_lease_exactly_one_wins(store):
    clock = Clock()
    won = race([Lease(store, KEY, f"creator-{index}", 60, now=clock) for index in range(4)])
    assert sum(won) == 1


def test_a_lease_that_cannot_be_read_can_be_taken(store):
    store.put_bytes(KEY, b"not json")
    assert Lease(store, KEY, "new", 60, now=Clock()).take()


def test_a_lease_written_with_seconds_since_the_epoch_still_reads():
    store, clock = MemoryStore(), Clock()
    store.put_bytes(KEY, b'{"holder": "old", "expires_at": %d}' % (clock.at.timestamp() + 30))
    assert not Lease(store, KEY, "new", 60, now=clock).take()
    clock.at += timedelta(seconds=31)
    assert Lease(store, KEY, "new", 60, now=clock).take()
