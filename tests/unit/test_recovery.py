"""A restart of the embedded default loses no run: the server is killed with work in its
in-memory queue (and delayed deadlines), a new process on the same store re-drives each
unfinished run from what is stored (`services/archiver/recovery.py`), and the run ends with one
email, nothing measured twice that had been measured."""

from __future__ import annotations

import json

import pytest

from adapters.memory_store import MemoryStore
from schemas import keys
from services.archiver.recovery import recover
from services.request.runs import record_run
from services.request.submission import new_run
from tests.fakes import embedded_with_fakes
from tests.unit.test_pipeline import Fakes, request


class Killed(BaseException):
    """The process dies: the bus's queue and its delayed events are lost."""


def make_app(tmp_path, fakes, store):
    return embedded_with_fakes(tmp_path, fakes, store)


@pytest.mark.parametrize(
    "killed_at, nth",
    [
        ("RequestSubmitted", 1),  # nothing handled yet
        ("ComboPending", 1),  # planned, nothing converted
        ("ModelConverted", 2),  # one combination measured, the other about to be
        ("InferenceDone", 2),  # both measured, the run about to close
        ("RunArchived", 1),  # archived, not yet announced
    ],
)
def test_a_run_killed_mid_way_completes_after_the_restart(tmp_path, killed_at, nth):
    fakes, store = Fakes(), MemoryStore()
    app = make_app(tmp_path, fakes, store)
    req = request(app)
    envelope = new_run(req)
    record_run(store, envelope.run_id, req)
    seen = []

    def kill(queue, event) -> None:
        seen.append(event.type)
        if event.type == killed_at and seen.count(killed_at) == nth:
            raise Killed

    app.bus.observers.append(kill)
    app.publisher.publish([envelope])
    with pytest.raises(Killed):
        app.bus.run_until_idle()
    assert not store.exists(keys.summary(envelope.run_id)) or killed_at == "RunArchived"

    restarted = make_app(tmp_path, fakes, store)  # a new process: an empty bus on the same store
    found = recover(store, restarted.publisher)
    assert envelope.run_id in found.runs + found.announced
    restarted.bus.run_until_idle()
    summary = json.loads(store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "complete" and len(summary["results"]) == 2
    assert len(fakes.sent) == 1
    assert fakes.measurements == {("onnx", 1769): 1, ("onnx", 3538): 1}  # what was measured is not measured again
    # a second restart finds nothing to do
    again = recover(store, make_app(tmp_path, fakes, store).publisher)
    assert again.runs == [] and again.announced == []


def test_a_restart_re_arms_the_deadline_of_a_run_whose_work_is_lost(tmp_path):
    """Work that left no trace (here: a conversion dropped from the log) cannot be re-driven;
    the re-armed deadline still ends the run, with the reason."""
    fakes, store = Fakes(), MemoryStore()
    app = make_app(tmp_path, fakes, store)
    req = request(app)
    envelope = new_run(req)
    record_run(store, envelope.run_id, req)

    def kill(queue, event) -> None:
        if event.type == "ComboPending":
            raise Killed

    app.bus.observers.append(kill)
    app.publisher.publish([envelope])
    with pytest.raises(Killed):
        app.bus.run_until_idle()
    for key in store.list_keys(keys.event_log_prefix(envelope.run_id)):
        if "-ComboPending-" in key:
            del store.objects[key]
    restarted = make_app(tmp_path, fakes, store)
    recover(store, restarted.publisher)
    restarted.bus.run_until_idle()  # idle: the bus skips ahead to the deadline
    summary = json.loads(store.get_bytes(keys.summary(envelope.run_id)))
    assert summary["status"] == "failed" and summary["closed_at_deadline"]
    assert all("deadline" in f["reason"] for f in summary["failures"]) and len(fakes.sent) == 1
