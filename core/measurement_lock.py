"""One measurement at a time per machine, and nothing of the pipeline beside it.

A measurement holds the machine's measurement lock exclusively; conversion and tuning hold it
shared. On a 2-core machine ResNet-18 under ONNX Runtime measured 112 ms p50 with other work
running and 20 ms on a quiet machine, so overlapping work would make the figures wrong.

The lock is an `flock` on one file (`AYCI_MEASUREMENT_LOCK`, default
`/tmp/ayci-measurement.lock`; docker-compose puts it on a volume every container shares), so
it spans every process on the machine (queue workers, the CLI, tests) and the kernel releases
it when a holder dies.

Measurements go first: a measurement waiting for the lock holds a turnstile (a second file,
`<lock>.turnstile`) that new conversions must pass, so a stream of conversions cannot starve
it; it waits only for the conversions already running. A measurement that still cannot get
the lock in time is retried later by its caller, never failed for good.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

POLL_S = 0.05


class LockTimeout(Exception):
    """The lock was not free within the time allowed."""


def lock_path() -> Path:
    return Path(os.environ.get("AYCI_MEASUREMENT_LOCK", "/tmp/ayci-measurement.lock"))


@contextmanager
def _locked(mode: int, timeout_s: float | None, path: Path | None = None) -> Iterator[float]:
    path = path or lock_path()
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        with contextlib.suppress(OSError):  # every user of the machine shares it (the umask took write away)
            os.fchmod(fd, 0o666)
    except PermissionError:  # another user's lock, not writable by this one: flock needs only an open file
        fd = os.open(path, os.O_RDONLY)
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    raise LockTimeout(
                        f"the machine's measurement lock ({path}) was busy for {timeout_s:.0f} s"
                    ) from None
                time.sleep(POLL_S)
        yield time.monotonic() - started
    finally:
        os.close(fd)  # closing releases the lock


def _turnstile() -> Path:
    return lock_path().with_name(lock_path().name + ".turnstile")


@contextmanager
def exclusive(timeout_s: float | None = None) -> Iterator[float]:
    """Hold the lock alone (a measurement); yields the seconds spent waiting for it. While it
    waits, no new shared holder gets in."""
    started = time.monotonic()
    with _locked(fcntl.LOCK_EX, timeout_s, _turnstile()):
        remaining = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
        lock = _locked(fcntl.LOCK_EX, remaining)
        lock.__enter__()
    try:
        yield time.monotonic() - started
    finally:
        lock.__exit__(None, None, None)


@contextmanager
def shared(timeout_s: float | None = None) -> Iterator[float]:
    """Hold the lock beside other shared holders (conversion, tuning), never beside a
    measurement, and never before a measurement that is waiting; yields the seconds spent
    waiting for it."""
    started = time.monotonic()
    with _locked(fcntl.LOCK_SH, timeout_s, _turnstile()):
        pass  # passes only when no measurement waits
    remaining = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - started))
    with _locked(fcntl.LOCK_SH, remaining):
        yield time.monotonic() - started
