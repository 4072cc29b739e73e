"""Many models behind one endpoint: each loads on its first request into the memory budget,
the least recently used idle models are evicted to make room, and a scaler thread grows and
shrinks every model's pool (`scaling.py`) within the budget.

`infer(name, inputs)` is the whole request path: unknown model `UnknownModel`; a model not
loaded gets its pool and first worker here (under the endpoint's lock, so concurrent first
requests load it once and all wait for that load); then the request is queued on the pool.
`Overloaded` when it cannot be taken now (the queue is full, or no room can be made).

Lambda-like (`policy.lambda_like`): a model's pool starts with no worker and each request that
finds no idle worker starts one (memory made for it as for a scale-out); idle workers are all
reclaimed after the idle time, and a pool left with none stays (its model is evicted only for
room). `time_cold_starts` times real worker starts (the cold starts the simulation is fed).
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import structlog

from measuring.confinement import unavailable_reason
from serving import wire
from serving.budget import MemoryBudget
from serving.models import ServedModel
from serving.pool import ModelPool, Overloaded, Worker
from serving.processes import ProcessWorker, WorkerSpec
from serving.scaling import ScalingPolicy

log = structlog.get_logger()

TICK_S = 0.1


class UnknownModel(KeyError):
    pass


class Endpoint:
    def __init__(
        self,
        models: list[ServedModel],
        *,
        budget_mb: int,
        policy: ScalingPolicy,
        max_queue: int = 32,
        work_dir: Path | None = None,
        confine: bool = True,
        start_worker: Callable[[ServedModel], Worker] | None = None,
    ) -> None:
        self.models = {m.name: m for m in models}
        too_big = [m for m in models if m.memory_mb > budget_mb]
        if too_big:
            needs = ", ".join(f"{m.name} needs {m.memory_mb} MB" for m in too_big)
            raise ValueError(f"memory budget {budget_mb} MB: {needs} per worker")
        self.budget = MemoryBudget(budget_mb)
        self.policy = policy
        self.max_queue = max_queue
        self.confine = confine
        self.work_dir = work_dir or Path(tempfile.mkdtemp(prefix="ayci-endpoint-"))
        self._start_worker = start_worker or self._process_worker
        self.confinement_reason = (
            (unavailable_reason() if confine else "confinement turned off")
            if start_worker is None
            else "in-process workers"
        )
        self.pools: dict[str, ModelPool] = {}
        self.evictions: Counter[str] = Counter()
        self.loads: Counter[tuple[str, str]] = Counter()  # of pools gone (evicted): (model, kind) -> loads
        self.lost_workers: Counter[str] = Counter()
        self.load_seconds: dict[str, list[float]] = {name: [] for name in self.models}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._holding = 0  # `holding_workers`: no worker is retired while above 0
        self._scaler = threading.Thread(target=self._scale_forever, name="scaler", daemon=True)

    # --- lifecycle
    def start(self) -> Endpoint:
        self._scaler.start()
        return self

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for name in list(self.pools):
                self._unload(name)

    @contextlib.contextmanager
    def holding_workers(self):
        """No idle worker is retired inside (a load test's calibration keeps its warm worker)."""
        with self._lock:
            self._holding += 1
        try:
            yield self
        finally:
            with self._lock:
                self._holding -= 1

    def reset(self) -> None:
        """Unload every model and forget the counts of loads, evictions and lost workers (what a
        load test's calibration did is not part of its load)."""
        with self._lock:
            for name in list(self.pools):
                self._unload(name)
            self.loads.clear()
            self.evictions.clear()
            self.lost_workers.clear()

    def _process_worker(self, model: ServedModel) -> Worker:
        result = model.result
        spec = WorkerSpec(
            optimizer=model.optimizer,
            artifact_path=str(model.artifact_path),
            threads=result.threads or 1,
            memory_mb=model.memory_mb,
            settings=result.engine_settings,
            reference_path=str(model.reference_path),
            confine=self.confine,
        )
        return ProcessWorker.start(spec, self.work_dir)

    # --- requests
    def infer(self, name: str, inputs: dict[str, np.ndarray]) -> Future:
        """Queue `inputs` for model `name`; a future of the pool's `Served`."""
        if name not in self.models:
            raise UnknownModel(name)
        if self.policy.lambda_like:
            payload = wire.pack(inputs)
            with self._lock:
                pool = self.pools.get(name) or self._load(name)
                self.budget.touch(name)
                return pool.submit(payload, reserve=lambda: self._reserve_worker(name))
        with self._lock:
            pool = self.pools.get(name) or self._load(name)
            self.budget.touch(name)
        return pool.submit(wire.pack(inputs))

    def _load(self, name: str) -> ModelPool:
        """A pool for `name` with its first worker starting, memory made for it by evicting."""
        model = self.models[name]
        if not self._make_room(name, model.memory_mb):
            raise Overloaded(f"model {name} needs {model.memory_mb} MB and the budget's other models are all busy", 1)
        pool = ModelPool(
            name, lambda: self._start_worker(model), self.policy, self.max_queue, may_retire=lambda: not self._holding
        )
        self.pools[name] = pool
        if self.policy.lambda_like:  # its workers start with the requests (`_reserve_worker`)
            log.info("model_pool_created", model=name, run_id=model.run_id, combination=model.label)
            return pool
        self.budget.reserve(name, model.memory_mb)
        pool.spawn("first")
        log.info("model_loading", model=name, run_id=model.run_id, combination=model.label)
        return pool

    def _reserve_worker(self, name: str) -> bool:
        """Memory for one more worker of `name` (evicting idle models for it): False if none can be made."""
        pool = self.pools.get(name)
        if pool is not None:  # workers the pool reclaimed at this arrival give their memory back first
            excess_mb = self.budget.reserved_mb(name) - pool.reserved_workers * self.models[name].memory_mb
            if excess_mb > 0:
                self.budget.release(name, excess_mb)
        if not self._make_room(name, self.models[name].memory_mb):
            return False
        self.budget.reserve(name, self.models[name].memory_mb)
        return True

    def time_cold_starts(self, name: str, count: int) -> list[float]:
        """Start and stop `count` workers of `name` one after the other, outside any pool: how long
        each took from its start to ready (ms: the sandbox, the imports, the load, the first
        inference), as the pool's cold starts take."""
        model = self.models[name]
        took = []
        for _ in range(count):
            started = time.monotonic()
            worker = self._start_worker(model)
            took.append((time.monotonic() - started) * 1000)
            worker.stop()
        return took

    def _make_room(self, name: str, need_mb: int) -> bool:
        victims = self.budget.evictions_for(
            name, need_mb, idle=lambda other: other in self.pools and self.pools[other].idle
        )
        if victims is None:
            return False
        for victim in victims:
            log.info("model_evicted", model=victim, for_model=name)
            self.evictions[victim] += 1
            self._unload(victim)
        return True

    def _unload(self, name: str) -> None:
        pool = self.pools.pop(name)
        pool.close()
        for kind, count in pool.loads.items():
            self.loads[(name, kind)] += count
        self.lost_workers[name] += pool.lost_workers
        self.budget.drop(name)

    # --- scaling
    def _scale_forever(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.scale()
            except Exception:  # the scaler must outlive any one bad tick
                log.exception("scaler_tick_failed")

    def scale(self, now: float | None = None) -> None:
        """One tick: retire idle workers, drop pools whose every load failed, scale out the
        pools whose queues wait, if the budget has (or can be made to have) room."""
        now = time.monotonic() if now is None else now
        with self._lock:
            for name, pool in list(self.pools.items()):
                if not self._holding:
                    pool.retire_idle(now)
                if (
                    pool.reserved_workers == 0 and not self.policy.lambda_like
                ):  # every load failed: a later request tries again
                    self._unload(name)
                    continue
                excess_mb = self.budget.reserved_mb(name) - pool.reserved_workers * self.models[name].memory_mb
                if excess_mb > 0:  # retired workers' memory
                    self.budget.release(name, excess_mb)
                if pool.wants_worker() and self._make_room(name, self.models[name].memory_mb):
                    self.budget.reserve(name, self.models[name].memory_mb)
                    pool.spawn("scale-out")

    # --- what GET /models and the metrics show
    def load_counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            counts = Counter(self.loads)
            for name, pool in self.pools.items():
                for kind, count in pool.loads.items():
                    counts[(name, kind)] += count
            return dict(counts)

    def state(self) -> list[dict]:
        loads = self.load_counts()
        with self._lock:
            rows = []
            for name, model in self.models.items():
                pool = self.pools.get(name)
                rows.append(
                    {
                        **model.public(),
                        "loaded": pool is not None,
                        "workers": pool.workers if pool else 0,
                        "starting": pool.starting if pool else 0,
                        "busy": pool.busy if pool else 0,
                        "queue_depth": pool.queue_depth if pool else 0,
                        "worker_pids": pool.worker_pids() if pool else [],
                        "loads": {kind: n for (m, kind), n in loads.items() if m == name},
                        "evictions": self.evictions[name],
                        "lost_workers": self.lost_workers[name] + (pool.lost_workers if pool else 0),
                        "last_load_error": (pool.failed_loads[-1] if pool and pool.failed_loads else None),
                        "reserved_mb": self.budget.reserved_mb(name),
                    }
                )
            return rows
