"""Per-owner limits hold under concurrent submissions: the request app reserves a run in the owner's
reservation document with a compare-and-put before it records or publishes anything."""

from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient

from adapters.local_store import LocalFolderStore
from adapters.memory_store import MemoryStore
from adapters.uploads import LocalUploader
from ayci.bootstrap import request_limits
from ayci.settings import Settings
from services.request.app import RequestDeps, create_app, parse_api_keys
from services.request.limits import reservation_key
from tests.fakes import RecordingPublisher, tiny_onnx_model
from tests.unit.test_request_api import ALICE, run_body, upload


class RacingPublisher(RecordingPublisher):
    """Holds every publish a moment, so submissions overlap; fails when told to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail, self.lock = fail, threading.Lock()

    def publish(self, envelopes) -> None:
        threading.Event().wait(0.01)
        if self.fail:
            raise ConnectionError("the bus is down")
        with self.lock:
            super().publish(envelopes)


class Latency:
    """A store whose reads take a few milliseconds, as S3's do: racing submissions interleave."""

    def __init__(self, store) -> None:
        self.store = store

    def __getattr__(self, name):
        return getattr(self.store, name)

    def get_versioned(self, key: str):
        found = self.store.get_versioned(key)
        threading.Event().wait(0.005)
        return found


@pytest.fixture(params=["memory", "folder"])
def deps(request, tmp_path):
    settings = Settings(data_dir=tmp_path / "data", max_body_bytes=4096, max_model_bytes=10_000_000)
    store = Latency(MemoryStore() if request.param == "memory" else LocalFolderStore(settings.data_dir))
    return RequestDeps(
        store=store,
        publisher=RacingPublisher(),
        api_keys=parse_api_keys("alice-key-123:alice"),
        uploader=LocalUploader(tmp_path / "uploads"),
        limits=request_limits(settings),
    )


@pytest.fixture
def model(deps):
    data = tiny_onnx_model()
    assert upload(TestClient(create_app(deps)), data).status_code == 201
    return hashlib.sha256(data).hexdigest(), len(data)


def post_at_once(deps, body: dict, n: int) -> list[int]:
    client = TestClient(create_app(deps))
    start = threading.Barrier(n)

    def post(_):
        start.wait()
        return client.post("/runs", headers=ALICE, json=body).status_code

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(post, range(n)))


def test_concurrent_submissions_never_pass_the_runs_in_flight(deps, model):
    deps.limits = replace(deps.limits, max_runs_in_flight=2, max_combinations_per_day=10_000)
    codes = post_at_once(deps, run_body(*model), 12)
    assert sorted(codes) == [201] * 2 + [429] * 10, codes
    assert len(deps.publisher.published) == 2
    reserved = json.loads(deps.store.get_bytes(reservation_key("alice")))
    assert len(reserved["runs"]) == 2 and reserved["combinations"] == 4


def test_concurrent_submissions_never_pass_the_daily_combinations(deps, model):
    deps.limits = replace(deps.limits, max_runs_in_flight=100, max_combinations_per_day=10)
    five = run_body(*model, matrix={"intel": ["onnx"]}, memory_sizes_mb=[512, 1024, 1769, 2048, 3008])
    codes = post_at_once(deps, five, 40)
    assert sorted(codes) == [201] * 2 + [429] * 38, codes
    assert sum(len(e.payload.matrix.combos()) for e in deps.publisher.published) == 10


def test_a_run_that_ends_gives_its_place_back(deps, model):
    deps.limits = replace(deps.limits, max_runs_in_flight=1)
    client = TestClient(create_app(deps))
    first = client.post("/runs", headers=ALICE, json=run_body(*model))
    assert first.status_code == 201
    assert client.post("/runs", headers=ALICE, json=run_body(*model)).status_code == 429
    deps.store.put_bytes(f"runs/{first.json()['run_id']}/summary.json", b"{}")  # archived
    assert client.post("/runs", headers=ALICE, json=run_body(*model)).status_code == 201


def test_a_failed_submission_releases_its_reservation(deps, model):
    deps.limits = replace(deps.limits, max_runs_in_flight=1, max_combinations_per_day=2)
    client = TestClient(create_app(deps))
    deps.publisher.fail = True
    for _ in range(3):  # each failure gives its run and its 2 combinations back
        answer = client.post("/runs", headers=ALICE, json=run_body(*model))
        assert answer.status_code == 503, answer.text
    reserved = json.loads(deps.store.get_bytes(reservation_key("alice")))
    assert reserved["runs"] == {} and reserved["combinations"] == 0
    deps.publisher.fail = False
    assert client.post("/runs", headers=ALICE, json=run_body(*model)).status_code == 201
