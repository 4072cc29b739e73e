"""Open-loop load: each request is sent at its scheduled time, whatever the earlier ones are doing,
and its latency counts from that scheduled time (no coordinated omission).

Why not Locust: a Locust user is a closed loop (it sends, waits for the answer, waits its
`wait_time`, sends again), and `constant_throughput` is still per user: when the endpoint slows
down, each user's next request leaves later, so the offered rate falls exactly when it matters
and the slow answers are under-counted (coordinated omission). Emulating open-loop arrivals with
Locust needs one user per in-flight request and custom timing around its client, at which point
Locust adds a process, gevent and its own statistics for nothing. This module is a small asyncio
generator (aiohttp, already installed with aiobotocore): one task per request, started at its
scheduled time by a single scheduler loop, any number in flight.

The API (used by `serving/loadtest.py` and `serving/capacity.py`):

- `schedule(pattern, rps, duration_s, seed)`: arrival times (s from the start, sorted) for
  `steady` (Poisson at `rps`), `spiky` (Poisson at `rps` with bursts of `BURST_MULTIPLIER` x `rps`:
  one in the middle of each half, a sixth of the half long) or a CSV file of arrival times
  (`core.lambda_model.arrivals`' format), cut to `duration_s`.
- `Outgoing(path, body, content_type, label)`: one request to send (POST `url + path`).
- `await run_open_loop(url, arrivals_s, make_request, timeout_s=..., max_in_flight=...)`:
  sends `make_request(i)` at `arrivals_s[i]` for each i, returns one `RequestTiming` each (in
  the order of `arrivals_s`).
- `drive(url, arrivals_s, requests, ...)`: the same in a child process of its own (so the
  generator does not share a GIL with an endpoint served from this process); `requests` is one
  `Outgoing` per arrival (the same body object may be repeated: it is sent to the child once).

`RequestTiming` times are seconds from the generator's start (`t0_unix` is that start on the wall
clock): `scheduled_s`, `started_s` (when the request actually left: the generator's own lag is
`send_lag_ms`), `finished_s`; `latency_ms` = finished - scheduled. `status` is the HTTP status
(0: no answer: connection error or the generator's timeout, `error` says which). `cold`,
`queued_ms`, `compute_ms` and `worker_pid` are what the endpoint reports in its headers
(`X-Cold-Load`, `X-Queued-Ms`, `X-Inference-Ms`, `X-Worker-Pid`), None when it does not;
`entered_s`, when the request entered the model's pool (`X-Pool-Entered-At`, the endpoint's monotonic
clock, which is the generator's `time.perf_counter()` on the same Linux host), in the same seconds.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import structlog

log = structlog.get_logger()

BURSTS = 2  # spiky: one burst in each half of the test
BURST_SHARE = 1 / 6  # of each half
PATTERNS = ("steady", "spiky")
DEFAULT_TIMEOUT_S = 120.0
LEAD_S = 0.5  # drive(): the schedule starts this long after the child is up
MAX_IN_FLIGHT = 2000  # connections at most: past it, a request waits for one (its lag shows it)


def burst_multiplier() -> float:
    from core.lambda_model.arrivals import BURST_MULTIPLIER

    return BURST_MULTIPLIER


@dataclass(frozen=True)
class Outgoing:
    path: str  # e.g. "/invocations/NAME"
    body: bytes
    content_type: str = "application/x-npz"
    label: str = ""  # what the timings are grouped by (the model)


@dataclass
class RequestTiming:
    index: int
    label: str
    scheduled_s: float
    started_s: float
    finished_s: float
    status: int  # 0: no HTTP answer (see `error`)
    error: str | None = None
    cold: bool | None = None
    queued_ms: float | None = None
    compute_ms: float | None = None
    worker_pid: int | None = None
    entered_s: float | None = None  # when it entered the model's pool (the endpoint's `X-Pool-Entered-At`)

    @property
    def latency_ms(self) -> float:
        """From the scheduled time to the answer: what a user sending at that time waited."""
        return (self.finished_s - self.scheduled_s) * 1000

    @property
    def send_lag_ms(self) -> float:
        """How late the generator sent it (its own delay, part of `latency_ms`)."""
        return (self.started_s - self.scheduled_s) * 1000

    @property
    def overhead_ms(self) -> float | None:
        """Its latency beyond its time queued and in the worker (HTTP, the body's decoding, the answer's
        encoding, the hops between threads), when the endpoint reports those."""
        if self.queued_ms is None or self.compute_ms is None:
            return None
        return self.latency_ms - self.queued_ms - self.compute_ms

    @property
    def front_ms(self) -> float | None:
        """From its scheduled time to its entering the model's pool (the generator's lag, HTTP, the
        body's decoding, the front end's own waiting), when the endpoint reports it."""
        return None if self.entered_s is None else (self.entered_s - self.scheduled_s) * 1000

    @property
    def ok(self) -> bool:
        return self.status == 200

    def row(self) -> dict:
        return {
            **asdict(self),
            "latency_ms": self.latency_ms,
            "send_lag_ms": self.send_lag_ms,
            "front_ms": self.front_ms,
        }


# --- arrivals
def rate_at(pattern: str, rps: float, duration_s: float, t: float) -> float:
    """Requests per second the pattern asks for at `t` s into a test of `duration_s`."""
    if pattern == "spiky":
        half = duration_s / BURSTS
        into = t % half
        if half / 2 <= into < half / 2 + half * BURST_SHARE:
            return rps * burst_multiplier()
    return rps


def burst_windows(duration_s: float) -> list[tuple[float, float]]:
    half = duration_s / BURSTS
    return [(i * half + half / 2, i * half + half / 2 + half * BURST_SHARE) for i in range(BURSTS)]


def schedule(pattern: str, rps: float, duration_s: float, seed: int = 0) -> list[float]:
    """Arrival times (s, sorted, within `duration_s`) of `pattern`: steady, spiky or a CSV file."""
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration: above 0 s, got {duration_s!r}")
    if pattern not in PATTERNS:
        from core.lambda_model.arrivals import arrivals_from_file

        times = arrivals_from_file(Path(pattern))
        return [float(t) for t in times if t < duration_s]
    if not (math.isfinite(rps) and rps > 0):
        raise ValueError(f"rps: above 0, got {rps!r}")
    rng = np.random.default_rng(seed)
    times = [rng.uniform(0, duration_s, rng.poisson(rps * duration_s))]
    if pattern == "spiky":
        extra = rps * (burst_multiplier() - 1)
        times += [rng.uniform(a, b, rng.poisson(extra * (b - a))) for a, b in burst_windows(duration_s)]
    return sorted(float(t) for t in np.concatenate(times))


# --- sending
async def run_open_loop(
    url: str,
    arrivals_s: Sequence[float],
    make_request: Callable[[int], Outgoing],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_in_flight: int = MAX_IN_FLIGHT,
    t0: float | None = None,
) -> list[RequestTiming]:
    """Send `make_request(i)` to `url` at `arrivals_s[i]` s after the start (now, or the
    `time.perf_counter()` value `t0`), whatever the answers; one timing per arrival."""
    import aiohttp

    if any(b < a for a, b in zip(arrivals_s, arrivals_s[1:], strict=False)):
        raise ValueError("arrival times must be sorted")
    base = url.rstrip("/")
    timings: list[RequestTiming | None] = [None] * len(arrivals_s)
    connector = aiohttp.TCPConnector(limit=max_in_flight, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    start = time.perf_counter() if t0 is None else t0

    async def send(i: int, session: aiohttp.ClientSession) -> None:
        request = make_request(i)
        sent = time.perf_counter() - start
        status, error, headers = 0, None, {}
        try:
            async with session.post(
                base + request.path, data=request.body, headers={"content-type": request.content_type}
            ) as response:
                await response.read()
                status, headers = response.status, response.headers
        except TimeoutError:
            error = f"no answer within {timeout_s:g} s"
        except aiohttp.ClientError as exc:
            error = f"{type(exc).__name__}: {exc}"
        done = time.perf_counter() - start
        timings[i] = RequestTiming(
            index=i,
            label=request.label,
            scheduled_s=float(arrivals_s[i]),
            started_s=sent,
            finished_s=done,
            status=status,
            error=error,
            cold=(headers["x-cold-load"] == "1") if "x-cold-load" in headers else None,
            queued_ms=_number(headers.get("x-queued-ms")),
            compute_ms=_number(headers.get("x-inference-ms")),
            worker_pid=int(headers["x-worker-pid"]) if headers.get("x-worker-pid", "").isdigit() else None,
            # CLOCK_MONOTONIC both (`time.monotonic` there, `time.perf_counter` here): one clock on one host
            entered_s=entered - start if (entered := _number(headers.get("x-pool-entered-at"))) is not None else None,
        )

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks = []
        for i, at in enumerate(arrivals_s):
            wait = at - (time.perf_counter() - start)
            if wait > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(send(i, session)))
        await asyncio.gather(*tasks)
    return [t for t in timings if t is not None]


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _child(conn, url: str, arrivals_s: list[float], requests: list[Outgoing], timeout_s: float) -> None:
    try:
        t0 = time.perf_counter() + LEAD_S  # the child's imports and the session are ready before the first arrival
        t0_unix = time.time() + LEAD_S
        conn.send(("start", t0_unix, None))
        timings = asyncio.run(run_open_loop(url, arrivals_s, requests.__getitem__, timeout_s=timeout_s, t0=t0))
        conn.send(("ok", t0_unix, timings))
    except BaseException as exc:  # the parent says what failed
        conn.send(("error", 0.0, f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def drive(
    url: str,
    arrivals_s: Sequence[float],
    requests: Sequence[Outgoing],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[float, list[RequestTiming]]:
    """`run_open_loop` in a child process: (its start on the wall clock, `time.time()`, which the
    arrivals count from; the timings).
    `RuntimeError` if the generator fails or overruns the last arrival by more than `timeout_s` + 60 s."""
    if len(requests) != len(arrivals_s):
        raise ValueError(f"{len(arrivals_s)} arrivals but {len(requests)} requests")
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    child = context.Process(
        target=_child, args=(theirs, url, list(arrivals_s), list(requests), timeout_s), name="open-loop", daemon=True
    )
    child.start()
    theirs.close()
    limit = (arrivals_s[-1] if len(arrivals_s) else 0) + timeout_s + 60
    try:
        kind = "start"
        while kind == "start":
            if not ours.poll(limit):
                raise RuntimeError(f"the load generator did not finish within {limit:.0f} s")
            kind, t0_unix, payload = ours.recv()
    except EOFError:
        raise RuntimeError(f"the load generator died (exit {child.exitcode})") from None
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
    if kind != "ok":
        raise RuntimeError(f"the load generator failed: {payload}")
    late = [t.send_lag_ms for t in payload]
    if late:
        log.info("open_loop_done", requests=len(payload), send_lag_p99_ms=round(float(np.percentile(late, 99)), 2))
    return t0_unix, payload
