"""One model's pool of workers and its bounded queue.

A request is queued (`submit`, a future) and taken by the idle worker freed last (as a Lambda
pool reuses instances, so the others idle out), one request per worker at a time; a full queue
refuses at once (`Overloaded`, with how long to wait) rather than queueing without bound. Each
worker has a thread that feeds it. A worker that dies in the middle
of a request (`WorkerLost`) is replaced, and its request is queued again once, at the front;
a second loss fails it. Workers are started by `spawn(kind)` in a thread of their own (a
cold load: `first`, `scale-out`, `replacement`), stopped by `retire_idle` when the scaling
policy says so, all of them by `close` (eviction). The pool does not know about memory: the
endpoint decides whether a new worker fits (`reserved_workers`).

Lambda-like (`policy.lambda_like`): `submit` first reclaims the workers idle past the idle time (at
the arrival, not at the scaler's next tick), then hands the request to the idle worker freed last, or,
when none is idle and the concurrency limit (`max_workers`, counting the starting ones) allows,
starts a worker for it (`spawn("cold", job)`: the request waits for that worker's cold start, as on
Lambda, even if another worker frees up meanwhile); at the limit it queues for the first worker to
free up. `reserve` (the endpoint's) is asked before each start: False (no memory) queues it too.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from serving.scaling import ScalingPolicy

log = structlog.get_logger()


class WorkerLost(Exception):
    """The worker's process died or stopped answering; the message says how."""


class InferenceFailed(Exception):
    """The model raised on this request (the worker lives on); the message is the model's."""


class LoadFailed(Exception):
    """No worker of the model could be started; the message says why."""


class Overloaded(Exception):
    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.retry_after_s = retry_after_s


class Worker(Protocol):
    pid: int | None
    load_ms: float  # how long it took from its start to ready

    def infer(self, payload: bytes) -> bytes: ...

    def stop(self) -> None: ...


@dataclass
class Served:
    payload: bytes
    cold: bool  # it waited for a worker to load (the worker that served it was not ready when it came)
    worker_pid: int | None
    queued_ms: float
    infer_ms: float
    entered_at: float | None = None  # `time.monotonic()` when it entered the pool (`submit`): this host's clock


@dataclass
class _Job:
    payload: bytes
    future: Future
    enqueued_at: float = field(default_factory=time.monotonic)
    retried: bool = False
    cold_start: bool = False  # lambda-like: a worker was started for it


@dataclass
class _Slot:
    worker: Worker
    ready_at: float
    idle_since: float
    busy: bool = False
    retire: bool = False
    assigned: _Job | None = None  # lambda-like: the request this worker takes next


class ModelPool:
    def __init__(
        self,
        name: str,
        start_worker: Callable[[], Worker],
        policy: ScalingPolicy,
        max_queue: int = 32,
        may_retire: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.max_queue = max_queue
        self._start_worker = start_worker
        self._may_retire = may_retire or (lambda: True)  # the endpoint's: False while it holds its workers
        self._cv = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._slots: list[_Slot] = []
        self._starting = 0
        self._closed = False
        self.loads: Counter[str] = Counter()  # cold loads by kind: first, scale-out, replacement
        self.load_ms: list[float] = []
        self.failed_loads: list[str] = []
        self.lost_workers = 0
        self.retired_workers = 0
        self.infer_ms_recent: deque[float] = deque(maxlen=200)
        # the threads that start workers, kept: `submit` runs on the endpoint's event loop, and starting a
        # thread there waits until the new thread runs (a GIL hand-off per cold start, on the loop)
        self._loader = ThreadPoolExecutor(max_workers=policy.max_workers + 2, thread_name_prefix=f"load-{name}")

    # --- the state the endpoint and the metrics read
    @property
    def workers(self) -> int:
        return len(self._slots)

    @property
    def starting(self) -> int:
        return self._starting

    @property
    def reserved_workers(self) -> int:
        """Workers running or starting: what the pool holds of the memory budget."""
        with self._cv:
            return len(self._slots) + self._starting

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def busy(self) -> int:
        return sum(s.busy for s in self._slots)

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing running: it may be evicted."""
        with self._cv:
            return not self._queue and not any(s.busy for s in self._slots)

    def worker_pids(self) -> list[int]:
        with self._cv:
            return [s.worker.pid for s in self._slots if s.worker.pid is not None]

    # --- requests
    def submit(self, payload: bytes, reserve: Callable[[], bool] | None = None) -> Future:
        """Queue a request; its future gives a `Served`, or raises `InferenceFailed`,
        `WorkerLost` (lost twice) or `LoadFailed`. `Overloaded` at once when the queue is full.
        Lambda-like: an idle worker or a new one (if `reserve()`, when given, says it fits) takes it."""
        with self._cv:
            if self._closed:
                raise Overloaded(f"model {self.name} is being evicted", 1)
            if self.policy.lambda_like and not self._queue:
                if self._may_retire():
                    # reclaimed at the arrival itself, as Lambda (and the simulation) reclaim an instance idle
                    # past the timeout: the scaler's ticks (every 0.1 s) would leave it to be reused up to a tick
                    # late, which moves the cold-start share when the idle time is short
                    self.retire_idle()
                job = _Job(payload, Future())
                slot = self._first_idle()
                if slot is not None:
                    slot.assigned, slot.busy = job, True
                    self._cv.notify_all()
                    return job.future
                if len(self._slots) + self._starting < self.policy.max_workers and (reserve is None or reserve()):
                    job.cold_start = True
                    self._starting += 1
                    self._loader.submit(self._load, "cold", job)
                    return job.future
            if len(self._queue) >= self.max_queue:
                raise Overloaded(
                    f"model {self.name}: {len(self._queue)} requests queued already (the limit)", self.retry_after_s()
                )
            job = _Job(payload, Future())
            self._queue.append(job)
            self._cv.notify_all()
        return job.future

    def retry_after_s(self) -> int:
        """Seconds until the queue has drained, by the recent inference times (at least 1)."""
        mean_ms = sum(self.infer_ms_recent) / len(self.infer_ms_recent) if self.infer_ms_recent else 100.0
        return max(1, math.ceil(len(self._queue) * mean_ms / 1000 / max(1, len(self._slots))))

    def wants_worker(self) -> bool:
        with self._cv:
            idle = sum(1 for s in self._slots if not s.busy)
            return not self._closed and self.policy.scale_out(
                queued=len(self._queue),
                idle_workers=idle,
                starting=self._starting,
                workers=len(self._slots) + self._starting,
            )

    # --- workers
    def spawn(self, kind: str) -> None:
        """Start a worker in the background (a cold load of `kind`)."""
        with self._cv:
            self._starting += 1
        try:
            self._loader.submit(self._load, kind)
        except RuntimeError:  # closed meanwhile (the executor is shut down): nothing to start
            with self._cv:
                self._starting -= 1

    def _load(self, kind: str, job: _Job | None = None) -> None:
        started = time.monotonic()
        try:
            worker = self._start_worker()
        except Exception as exc:  # the load failed: the process died, timed out or the model did not load
            reason = str(exc) or type(exc).__name__
            log.warning("worker_load_failed", model=self.name, kind=kind, reason=reason)
            with self._cv:
                self._starting -= 1
                self.failed_loads.append(reason)
                stranded = [] if self._slots or self._starting else list(self._queue)
                if stranded:
                    self._queue.clear()
            if job is not None:
                stranded.append(job)
            for waiting in stranded:
                waiting.future.set_exception(LoadFailed(f"model {self.name} could not be loaded: {reason}"))
            return
        now = time.monotonic()
        with self._cv:
            self._starting -= 1
            if self._closed:
                worker.stop()
                if job is not None:
                    job.future.set_exception(Overloaded(f"model {self.name} was unloaded", 1))
                return
            slot = _Slot(worker, ready_at=now, idle_since=now, busy=job is not None, assigned=job)
            self._slots.append(slot)
            self.loads[kind] += 1
            self.load_ms.append((now - started) * 1000)
            self._cv.notify_all()
        log.info("worker_loaded", model=self.name, kind=kind, pid=worker.pid, load_ms=round((now - started) * 1000))
        threading.Thread(target=self._feed, args=(slot,), name=f"feed-{self.name}-{worker.pid}", daemon=True).start()

    def _feed(self, slot: _Slot) -> None:
        """Give `slot`'s worker one request at a time until it retires, dies or the pool closes."""
        while True:
            with self._cv:
                while (
                    slot.assigned is None
                    and not (self._queue and self._first_idle() is slot)
                    and not slot.retire
                    and not self._closed
                ):
                    self._cv.wait()
                if slot.retire or self._closed:
                    if slot.assigned is not None:
                        slot.assigned.future.set_exception(Overloaded(f"model {self.name} was unloaded", 1))
                    break
                job, slot.assigned = slot.assigned or self._queue.popleft(), None
                slot.busy = True
            taken = time.monotonic()
            try:
                out = slot.worker.infer(job.payload)
            except WorkerLost as exc:
                self._lost(slot, job, exc)
                return
            except InferenceFailed as exc:
                job.future.set_exception(exc)
            else:
                done = time.monotonic()
                self.infer_ms_recent.append((done - taken) * 1000)
                job.future.set_result(
                    Served(
                        out,
                        cold=job.cold_start if self.policy.lambda_like else slot.ready_at > job.enqueued_at,
                        worker_pid=slot.worker.pid,
                        queued_ms=(taken - job.enqueued_at) * 1000,
                        infer_ms=(done - taken) * 1000,
                        entered_at=job.enqueued_at,
                    )
                )
            with self._cv:
                slot.busy = False
                slot.idle_since = time.monotonic()
                self._cv.notify_all()
        slot.worker.stop()

    def _first_idle(self) -> _Slot | None:
        """The idle worker to take the next request: the most recently freed, as a Lambda pool
        reuses instances, so that the others stay idle and are retired when traffic falls."""
        idle = [s for s in self._slots if not s.busy and not s.retire]
        return max(idle, key=lambda s: s.idle_since) if idle else None

    def _lost(self, slot: _Slot, job: _Job, exc: WorkerLost) -> None:
        log.warning("worker_lost", model=self.name, pid=slot.worker.pid, reason=str(exc), retried=not job.retried)
        slot.worker.stop()
        with self._cv:
            self._slots.remove(slot)
            self.lost_workers += 1
            if not job.retried and not self._closed:
                job.retried = True
                self._queue.appendleft(job)
                job = None
            replace = not self._closed
            self._cv.notify_all()
        if job is not None:
            job.future.set_exception(WorkerLost(f"model {self.name}: the worker died twice on this request ({exc})"))
        if replace:
            self.spawn("replacement")  # it takes over the lost worker's memory

    def retire_idle(self, now: float | None = None) -> int:
        """Stop the workers idle for longer than the policy's idle time (at least one stays);
        how many were stopped."""
        now = time.monotonic() if now is None else now
        with self._cv:
            idle = [s for s in self._slots if not s.busy and not s.retire]
            count = self.policy.scale_in(idle_for_s=[now - s.idle_since for s in idle], workers=len(self._slots))
            retiring = sorted(idle, key=lambda s: s.idle_since)[:count]
            for slot in retiring:
                slot.retire = True
                self._slots.remove(slot)
            self.retired_workers += count
            self._cv.notify_all()
        return count

    def close(self) -> None:
        """Stop every worker (eviction, shutdown); what is still queued fails."""
        with self._cv:
            self._closed = True
            stranded = list(self._queue)
            self._queue.clear()
            slots, self._slots = self._slots, []
            self._cv.notify_all()
        for job in stranded:
            job.future.set_exception(Overloaded(f"model {self.name} was unloaded", 1))
        self._loader.shutdown(wait=False)
        for slot in slots:
            if not slot.busy:
                slot.worker.stop()
