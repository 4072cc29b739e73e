"""How fast this host runs a fixed piece of work, before and after each measuring child: a slowdown
that comes from outside the machine (another tenant of its hypervisor, a throttled CPU) shows nowhere
in the machine's own CPU accounting (`machine_load.py`), but slows every engine alike. Measured: the
issue-38 MiniLM exact run timed three minutes of batch-1 measurements 1.5 times slower than the rest
of that run and of the quick run beside it (base 30.9 against 18.6 ms p50, int8 23.7 against 15.6),
with no other process busy; its fastest pick moved with them.

`probe_ms()` times a fixed interpreter loop (one thread, no library) in two rounds of
`PROBE_REPEATS`, each round's total over its repeats: a throttled CPU stalls within a round and
slows its total, where a round's fastest repeat could fall between the stalls; the faster round
leaves out one preemption. `SpeedLog` keeps each probe in a small log shared by every process of
the host (beside the machine's measurement lock) and gives the host's reference: its fastest
probe of the last `REFERENCE_WINDOW_S`. A measurement's slowdown is the slower of its two probes
over that reference; above `SLOW_HOST_RATIO` the measurement was disturbed (`machine_load.load_report`).
A host slower for longer than the window becomes its own reference: its figures then agree with
each other, measured on the host as it is.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from core import measurement_lock

PROBE_LOOP = 100_000  # one repeat: about 5 ms on the 2-core Xeon and EPYC hosts of docs/benchmarks.md
PROBE_REPEATS = 6  # a round of about 30 ms: two probes a measuring child, 0.1 s
# On a quiet host the probe moves by about 1 % (one other core busy: no change on 2 cores; both busy: 1.8x).
# The run-to-run slack racing allows (`core.racing.RUN_TO_RUN_SLACK`) is 15 %; a host 25 % slower moves
# every figure by more than that.
SLOW_HOST_RATIO = 1.25
REFERENCE_WINDOW_S = 3600.0
MIN_REFERENCE_PROBES = 5  # fewer kept in the window: no reference yet (a fresh host)
LOG_KEEP = 2000  # probes kept in the log (rewritten when it holds twice as many)


def _round_ms(loop: int, repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        total = 0
        for i in range(loop):
            total += i * i % 7
    return (time.perf_counter() - started) * 1000 / repeats


def probe_ms(loop: int = PROBE_LOOP, repeats: int = PROBE_REPEATS) -> float:
    """One repeat of the fixed loop, in ms: the faster of two rounds' means."""
    return min(_round_ms(loop, repeats), _round_ms(loop, repeats))


def speed_log_path() -> Path:
    lock = measurement_lock.lock_path()
    return lock.with_name(f"{lock.name}.speed")


class SpeedLog:
    """The host's probes (`time probe_ms` per line), appended by every process of the host."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or speed_log_path()

    def add(self, probe: float, at: float | None = None) -> None:
        line = f"{time.time() if at is None else at:.3f} {probe:.4f}\n".encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                os.write(fd, line)  # one write of a short line under O_APPEND: never interleaved
            finally:
                os.close(fd)
            if self.path.stat().st_size > 2 * LOG_KEEP * len(line):
                self._trim()
        except OSError:
            pass  # a host whose log cannot be written has no reference: nothing is judged slow

    def _trim(self) -> None:
        kept = self.path.read_bytes().splitlines(keepends=True)[-LOG_KEEP:]
        spare = self.path.with_name(f"{self.path.name}.{os.getpid()}")
        spare.write_bytes(b"".join(kept))
        spare.replace(self.path)

    def reference_ms(self, now: float | None = None) -> float | None:
        """The host's fastest probe of the last `REFERENCE_WINDOW_S` (None: fewer than `MIN_REFERENCE_PROBES`)."""
        now = time.time() if now is None else now
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return None
        probes = []
        for line in lines:
            try:
                at, probe = (float(v) for v in line.split())
            except ValueError:
                continue  # a line cut by a concurrent trim
            if now - at <= REFERENCE_WINDOW_S and probe > 0:
                probes.append(probe)
        return min(probes) if len(probes) >= MIN_REFERENCE_PROBES else None


def slowdown(before_ms: float | None, after_ms: float | None, reference_ms: float | None) -> float | None:
    """The slower of a measurement's two probes over the host's reference (None: no reference or no probe)."""
    probes = [p for p in (before_ms, after_ms) if p is not None]
    if not probes or not reference_ms:
        return None
    return max(probes) / reference_ms
