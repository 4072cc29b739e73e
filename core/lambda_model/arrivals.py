"""A traffic profile and its arrivals: what the traffic simulation (`core/lambda_model/traffic.py`)
and the load generator (`serving/open_loop.py`) send.

`steady` is Poisson at `rps`; `spiky` is Poisson at `rps` with bursts of `BURST_MULTIPLIER` x
`rps` for `BURST_S` seconds every `BURST_PERIOD_S` seconds; a CSV file gives arrival times in
seconds (one column, sorted) or per-minute counts (`minute,count`, spread evenly within each
minute). A simulated window holds at most the events it is given: the whole duration when the
traffic fits, else at least `MIN_WINDOW_S` (one burst period), thinned where even that holds more.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from schemas.lambda_limits import load_limits

BURST_MULTIPLIER = 10.0
BURST_S = 30.0
BURST_PERIOD_S = 600.0
MAX_EVENTS = 100_000  # per simulation: a request answers in seconds even for many combinations
MAX_RPS = 100_000.0
MIN_WINDOW_S = BURST_PERIOD_S  # a shorter window is thinned instead of shortened (one burst, warm pools)
MAX_FILE_ARRIVALS = 10_000_000  # a file of per-minute counts spreads at most this many arrivals
MAX_CONCURRENCY_LIMIT = 1_000_000


@dataclass(frozen=True)
class Window:
    """The arrivals simulated: `times` (s) within `window_s` of the duration, each arrival of the
    traffic kept with probability `kept` (1: not thinned)."""

    times: np.ndarray
    window_s: float
    cut_short: bool
    kept: float = 1.0


class TrafficError(ValueError):
    """A traffic profile that cannot be simulated; the message names the field."""


@dataclass(frozen=True)
class Traffic:
    rps: float
    pattern: str = "steady"  # steady | spiky | a CSV file's path
    idle_timeout_s: float = 600.0
    duration_s: float = 30 * 86400.0
    concurrency_limit: int | None = None  # None: the account's default (data/lambda_limits.json)

    @property
    def limit(self) -> int:
        """The concurrency limit simulated: the one given, else the account's default."""
        return self.concurrency_limit or load_limits().concurrency.account_default

    @property
    def limit_source(self) -> str:
        if self.concurrency_limit:
            return "given"
        limits = load_limits()
        return f"the account's default (data/lambda_limits.json, {limits.date}: {limits.concurrency.source.split()[0]})"

    def __post_init__(self) -> None:
        limit = self.concurrency_limit
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY_LIMIT
        ):
            raise TrafficError(f"concurrency_limit: a whole number from 1 to {MAX_CONCURRENCY_LIMIT:,}, got {limit!r}")
        if not (isinstance(self.rps, (int, float)) and math.isfinite(self.rps) and 0 < self.rps <= MAX_RPS):
            raise TrafficError(f"rps: a request rate above 0 and at most {MAX_RPS:,.0f} per second, got {self.rps!r}")
        if not (math.isfinite(self.idle_timeout_s) and 0 < self.idle_timeout_s <= 86400 * 7):
            raise TrafficError(f"idle_timeout: above 0 and at most 7 days, got {self.idle_timeout_s!r} s")
        if not (math.isfinite(self.duration_s) and 60 <= self.duration_s <= 366 * 86400):
            raise TrafficError(f"duration: from a minute to a year, got {self.duration_s!r} s")
        if self.pattern not in ("steady", "spiky") and not Path(self.pattern).is_file():
            raise TrafficError(f"pattern: steady, spiky or a CSV file of arrivals; {self.pattern!r} is none of them")


def parse_duration(text: str, name: str) -> float:
    """Seconds from `90`, `90s`, `10m`, `2h`, `30d`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = text.strip().lower()
    try:
        return float(text[:-1]) * units[text[-1]] if text and text[-1] in units else float(text)
    except ValueError:
        raise TrafficError(f"{name}: a duration like 90s, 10m, 2h or 30d, got {text!r}") from None


def arrivals(traffic: Traffic, rng: np.random.Generator) -> tuple[np.ndarray, float, bool]:
    """Arrival times (s) of a simulated window of at most `MAX_EVENTS`, its length, and whether it
    is shorter than the duration (`window_of`; thinned where even `MIN_WINDOW_S` holds more)."""
    window = window_of(traffic, rng, MAX_EVENTS)
    return window.times, window.window_s, window.cut_short


def window_of(traffic: Traffic, rng: np.random.Generator, events: int) -> Window:
    """At most `events` arrivals of `traffic`: the whole duration if it holds no more, else the
    window that does (at least `MIN_WINDOW_S`), thinned if that window holds more. Only the kept
    arrivals are ever drawn."""
    events = max(1, int(events))
    if traffic.pattern not in ("steady", "spiky"):
        return _file_window(arrivals_from_file(Path(traffic.pattern)), rng, events)
    spiky = traffic.pattern == "spiky"
    mean_rps = traffic.rps * (1 + (BURST_MULTIPLIER - 1) * BURST_S / BURST_PERIOD_S if spiky else 1)
    window = min(traffic.duration_s, max(events / mean_rps, MIN_WINDOW_S))
    # thinned so the expected count is a little under the share: a Poisson count past it is rare, and then cut
    kept = min(1.0, 0.95 * events / (mean_rps * window)) if mean_rps * window > events else 1.0
    rate = traffic.rps * kept
    times = rng.uniform(0, window, rng.poisson(rate * window))
    if spiky:
        extra = [
            rng.uniform(
                s, min(s + BURST_S, window), rng.poisson(rate * (BURST_MULTIPLIER - 1) * min(BURST_S, window - s))
            )
            for s in np.arange(0, window, BURST_PERIOD_S)
        ]
        times = np.concatenate([times, *extra])
    if len(times) > events:  # an unlucky Poisson draw: keep a uniform subset, the process stays Poisson-like
        kept *= events / len(times)
        times = rng.choice(times, events, replace=False)
    return Window(np.sort(times), window, window < traffic.duration_s, kept)


def _file_window(times: np.ndarray, rng: np.random.Generator, events: int) -> Window:
    """A file's arrivals: all of them, or a uniform thinning of them to `events`."""
    window = max(float(times[-1]) if len(times) else 0.0, 1.0)
    if len(times) <= events:
        return Window(times, window, False)
    kept = events / len(times)
    return Window(np.sort(rng.choice(times, events, replace=False)), window, False, kept)


def arrivals_from_file(path: Path) -> np.ndarray:
    rows = [row for row in csv.reader(path.read_text().splitlines()) if row and not row[0].strip().startswith("#")]
    if rows and not _is_number(rows[0][0]):
        rows = rows[1:]  # a header
    if not rows:
        raise TrafficError(f"pattern: {path} holds no arrivals")
    try:
        values = [[float(cell) for cell in row] for row in rows]
    except ValueError as exc:
        raise TrafficError(f"pattern: {path} has a value that is not a number ({exc})") from None
    if len(values[0]) >= 2:  # minute,count
        if sum(v[1] for v in values) > MAX_FILE_ARRIVALS:
            raise TrafficError(f"pattern: {path} counts more than {MAX_FILE_ARRIVALS:,} arrivals")
        times = []
        for minute, count in ((v[0], v[1]) for v in values):
            if count < 0 or count != int(count):
                raise TrafficError(f"pattern: {path}: a count must be a whole number >= 0, got {count}")
            times += list(minute * 60 + (np.arange(int(count)) + 0.5) * 60 / max(1, int(count)))
        out = np.asarray(sorted(times))
    else:
        out = np.asarray([v[0] for v in values])
        if np.any(np.diff(out) < 0):
            raise TrafficError(f"pattern: {path}: arrival times must be sorted (seconds, ascending)")
    if len(out) and out[0] < 0:
        raise TrafficError(f"pattern: {path}: arrival times must be >= 0")
    return out - (out[0] if len(out) else 0)


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
