"""The endpoint's plain parts: the memory budget's LRU eviction, the scaling policy, and a
model's pool of workers (in-process workers here; real worker processes in
tests/e2e/test_endpoint.py)."""

import threading
import time

import pytest

from serving.budget import MemoryBudget
from serving.pool import InferenceFailed, ModelPool, Overloaded, WorkerLost
from serving.scaling import ScalingPolicy


def test_budget_evicts_the_least_recently_used_idle_models_first():
    budget = MemoryBudget(3000)
    for model in ("a", "b", "c"):
        budget.reserve(model, 1000)
    budget.touch("a")  # b is now the least recently used
    assert budget.evictions_for("d", 1000, idle=lambda m: True) == ["b"]
    assert budget.evictions_for("d", 2000, idle=lambda m: True) == ["b", "c"]
    assert budget.evictions_for("d", 1000, idle=lambda m: m != "b") == ["c"]  # a busy model is never evicted
    assert budget.evictions_for("d", 1000, idle=lambda m: False) is None
    assert budget.evictions_for("a", 3001, idle=lambda m: True) is None  # more than the whole budget
    assert budget.drop("b") == 1000 and budget.free_mb == 1000
    assert budget.evictions_for("d", 1000, idle=lambda m: False) == []
    with pytest.raises(ValueError, match="do not fit"):
        budget.reserve("d", 1001)


def test_policy_scales_out_while_requests_wait_and_in_after_the_idle_time():
    policy = ScalingPolicy(max_workers=3, idle_s=10)
    assert policy.scale_out(queued=2, idle_workers=0, starting=0, workers=1)
    assert not policy.scale_out(queued=1, idle_workers=1, starting=0, workers=1)  # an idle worker takes it
    assert not policy.scale_out(queued=1, idle_workers=0, starting=1, workers=2)  # the starting worker will take it
    assert not policy.scale_out(queued=9, idle_workers=0, starting=0, workers=3)  # at the cap
    assert policy.scale_in(idle_for_s=[11, 12, 3], workers=3) == 2
    assert policy.scale_in(idle_for_s=[11], workers=1) == 0  # one worker stays
    with pytest.raises(ValueError):
        ScalingPolicy(max_workers=0)


class ThreadWorker:
    """An in-process worker: echoes the payload once `gate` opens; `die` makes the next
    request lose it, as a killed process would."""

    pids = iter(range(1000, 2000))

    def __init__(self, gate: threading.Event | None = None):
        self.pid = next(self.pids)
        self.load_ms = 0.0
        self.gate = gate
        self.die = False
        self.stopped = False

    def infer(self, payload: bytes) -> bytes:
        if self.gate is not None:
            self.gate.wait(5)
        if self.die:
            raise WorkerLost(f"worker {self.pid} killed")
        if payload == b"bad":
            raise InferenceFailed("the model raised")
        return payload.upper()

    def stop(self) -> None:
        self.stopped = True


def recorded_workers():
    """A worker factory and the list of the workers it started."""
    workers = []

    def start():
        workers.append(ThreadWorker())
        return workers[-1]

    return workers, start


def wait_for(condition, timeout_s=5.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_pool_serves_queues_and_refuses_beyond_its_queue():
    gate = threading.Event()
    started = []

    def start():
        started.append(ThreadWorker(gate))
        return started[-1]

    pool = ModelPool("m", start, ScalingPolicy(max_workers=2), max_queue=2)
    first = pool.submit(b"a")  # queued before any worker exists: it waits for the load
    pool.spawn("first")
    wait_for(lambda: pool.workers == 1 and pool.busy == 1)
    queued = [pool.submit(b"b"), pool.submit(b"c")]
    with pytest.raises(Overloaded) as refused:
        pool.submit(b"d")
    assert refused.value.retry_after_s >= 1
    assert pool.wants_worker()  # two wait, no worker starting
    gate.set()
    assert first.result(5).payload == b"A" and first.result().cold
    assert [f.result(5).payload for f in queued] == [b"B", b"C"]
    assert not queued[0].result().cold  # the worker was ready when it came
    assert pool.loads == {"first": 1} and len(started) == 1


def test_a_lost_worker_is_replaced_and_its_request_retried_once():
    workers, start = recorded_workers()
    pool = ModelPool("m", start, ScalingPolicy(max_workers=1))
    pool.spawn("first")
    wait_for(lambda: pool.workers == 1)
    workers[0].die = True
    answer = pool.submit(b"x").result(5)  # retried on the replacement
    assert answer.payload == b"X" and answer.worker_pid == workers[1].pid
    assert workers[0].stopped and pool.lost_workers == 1 and pool.loads == {"first": 1, "replacement": 1}
    with pytest.raises(InferenceFailed):  # the model's error is the request's, the worker lives on
        pool.submit(b"bad").result(5)
    assert pool.workers == 1 and pool.lost_workers == 1


def test_a_request_that_loses_two_workers_fails():
    def start():
        worker = ThreadWorker()
        worker.die = True
        return worker

    pool = ModelPool("m", start, ScalingPolicy(max_workers=1))
    pool.spawn("first")
    with pytest.raises(WorkerLost, match="died twice"):
        pool.submit(b"x").result(5)


def test_idle_workers_retire_down_to_one_and_close_stops_them():
    workers, start = recorded_workers()
    pool = ModelPool("m", start, ScalingPolicy(max_workers=3, idle_s=10))
    for _ in range(3):
        pool.spawn("scale-out")
    wait_for(lambda: pool.workers == 3)
    assert pool.retire_idle(time.monotonic()) == 0  # not idle long enough
    assert pool.retire_idle(time.monotonic() + 11) == 2
    wait_for(lambda: sum(w.stopped for w in workers) == 2)
    assert pool.workers == 1 and pool.reserved_workers == 1
    pool.close()
    wait_for(lambda: all(w.stopped for w in workers))
    with pytest.raises(Overloaded):
        pool.submit(b"x")


def test_a_failed_first_load_fails_the_waiting_requests_with_the_reason():
    def start():
        raise RuntimeError("out of memory at 128 MB")

    pool = ModelPool("m", start, ScalingPolicy())
    waiting = pool.submit(b"x")
    pool.spawn("first")
    with pytest.raises(Exception, match="could not be loaded: out of memory at 128 MB"):
        waiting.result(5)
    assert pool.reserved_workers == 0 and pool.failed_loads == ["out of memory at 128 MB"]


def test_the_worker_freed_last_takes_the_next_request_so_the_others_idle_out():
    workers, start = recorded_workers()
    pool = ModelPool("m", start, ScalingPolicy(max_workers=2, idle_s=10))
    pool.spawn("first")
    wait_for(lambda: pool.workers == 1)
    pool.spawn("scale-out")
    wait_for(lambda: pool.workers == 2)
    served_by = {pool.submit(b"x").result(5).worker_pid for _ in range(20)}
    assert served_by == {workers[1].pid}  # ready last, freed last: it takes every request in turn
    assert pool.retire_idle(time.monotonic() + 5) == 0


def test_lambda_like_pool_starts_a_worker_per_request_finding_none_idle_up_to_the_limit():
    gate = threading.Event()
    started = []

    def start():
        started.append(ThreadWorker(gate))
        return started[-1]

    reserved = []
    pool = ModelPool("m", start, ScalingPolicy(max_workers=2, idle_s=10, lambda_like=True), max_queue=4)
    first, second = pool.submit(b"a", reserve=lambda: reserved.append(1) or True), pool.submit(b"b")
    wait_for(lambda: pool.workers == 2)  # one worker each: none was idle
    third = pool.submit(b"c")  # at the limit: it queues for the first worker to free up
    assert pool.queue_depth == 1 and len(started) == 2 and reserved == [1]
    assert not pool.wants_worker()  # the scaler adds none: requests start them
    gate.set()
    assert first.result(5).cold and second.result(5).cold and not third.result(5).cold
    assert {first.result().worker_pid, second.result().worker_pid} == {w.pid for w in started}
    assert pool.loads == {"cold": 2}
    warm = pool.submit(b"d").result(5)  # an idle worker takes it: no new start
    assert not warm.cold and warm.payload == b"D" and len(started) == 2
    assert pool.retire_idle(time.monotonic() + 11) == 2 and pool.workers == 0  # all reclaimed, none kept
    again = pool.submit(b"e").result(5)
    assert again.cold and len(started) == 3 and pool.loads == {"cold": 3}


def test_lambda_like_request_waits_for_its_own_cold_start_and_fails_with_its_load():
    release = threading.Event()
    calls = []

    def start():
        calls.append(1)
        if len(calls) == 1:
            return ThreadWorker()
        release.wait(5)
        raise RuntimeError("out of memory at 128 MB")

    pool = ModelPool("m", start, ScalingPolicy(max_workers=3, lambda_like=True))
    gate = threading.Event()
    assert pool.submit(b"a").result(5).cold
    pool._slots[0].worker.gate = gate  # the warm worker now holds its next request
    busy = pool.submit(b"b")
    failing = pool.submit(b"c")  # none idle: a start of its own, which fails
    gate.set()
    assert busy.result(5).payload == b"B"  # the first worker freed up, but "c" waits for its own start
    release.set()
    with pytest.raises(Exception, match="could not be loaded: out of memory"):
        failing.result(5)
    assert pool.loads == {"cold": 1} and pool.failed_loads == ["out of memory at 128 MB"] and pool.workers == 1


def test_lambda_like_pool_reclaims_a_worker_idle_past_the_timeout_at_the_arrival_unless_held():
    """As Lambda and the simulation do: a worker idle longer than the idle time is not reused by the
    next request, even before the scaler's tick retires it; while the endpoint holds its workers
    (a load test's calibration) it is reused."""
    workers, start = recorded_workers()
    held = [False]
    pool = ModelPool(
        "m", start, ScalingPolicy(max_workers=2, idle_s=0.05, lambda_like=True), may_retire=lambda: not held[0]
    )
    assert pool.submit(b"a").result(5).cold
    assert not pool.submit(b"b").result(5).cold  # within the idle time: reused
    time.sleep(0.1)
    held[0] = True
    assert not pool.submit(b"c").result(5).cold  # held: the idle worker is reused
    time.sleep(0.1)
    held[0] = False
    again = pool.submit(b"d").result(5)  # no tick ran: reclaimed at the arrival, a new start
    assert again.cold and again.worker_pid == workers[1].pid and len(workers) == 2
    wait_for(lambda: workers[0].stopped)
    assert pool.workers == 1 and pool.retired_workers == 1 and pool.loads == {"cold": 2}


@pytest.mark.parametrize(
    "version, weight_file, starting, ready", [(1, "cpu.shares", "2", "1024"), (2, "cpu.weight", "1", "100")]
)
def test_a_worker_starts_at_the_lowest_cpu_weight_and_gets_an_ordinary_one_once_ready(
    tmp_path, version, weight_file, starting, ready
):
    """A start's CPU (imports, the session) must not slow the warm workers and the front end, as on
    Lambda; once ready the worker has an ordinary process's weight (`serving/processes.py`)."""
    from types import SimpleNamespace

    from serving.processes import _set_weight, ready_weight

    (tmp_path / weight_file).write_text("1024")
    (tmp_path / "cpu.idle").write_text("0")
    group = SimpleNamespace(hierarchy=SimpleNamespace(version=version), cpu_dir=tmp_path)
    _set_weight(group, starting=True)
    assert (tmp_path / weight_file).read_text() == starting and (tmp_path / "cpu.idle").read_text() == "1"
    ready_weight(group)
    assert (tmp_path / weight_file).read_text() == ready and (tmp_path / "cpu.idle").read_text() == "0"
    ready_weight(None)  # unconfined: nothing to set
