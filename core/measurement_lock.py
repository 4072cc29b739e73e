"""One measurement at a time per machine, and nothing of the pipeline beside it.

A measurement holds the machine's measurement lock exclusively; conversion and tuning hold it
shared. On a 2-core machine ResNet-18 under ONNX Runtime measured 112 ms p50 with other work
running and 20 ms on a quiet machine, so overlapping work would make the figures wrong.

The lock is an `flock` on one file (`AYCI_MEASUREMENT_LOCK`, default
`/tmp/ayci-measurement.lock`), so it spans every process on the machine (queue workers, the
CLI, tests) and the kernel releases it when a holder dies.
"""

from __future__ import annotations

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
def _locked(mode: int, timeout_s: float | None) -> Iterator[float]:
    path = lock_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    started = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout_s is not None and time.monotonic() - started > timeout_s:
                    raise LockTimeout(f"the machine's measurement lock ({path}) was busy for {timeout_s:.0f} s") from None
                time.sleep(POLL_S)
        yield time.monotonic() - started
    finally:
        os.close(fd)  # closing releases the lock


def exclusive(timeout_s: float | None = None):
    """Hold the lock alone (a measurement); yields the seconds spent waiting for it."""
    return _locked(fcntl.LOCK_EX, timeout_s)


def shared(timeout_s: float | None = None):
    """Hold the lock beside other shared holders (conversion, tuning), never beside a
    measurement; yields the seconds spent waiting for it."""
    return _locked(fcntl.LOCK_SH, timeout_s)
