"""Every decode bounded before it allocates (issue 31, Must show 1): the endpoint's bodies and
`PUT /inputs`. A 0.97 MB `.npz` of deflated zeros declaring (81380, 3, 32, 32) float32 (1 GB;
`fixtures/zeros_bomb.npz.gz`, made by writing that header and 1 GB of zeros into a deflated zip
member, then gzipped to keep the repository small) is refused with 413 in well under a second
while the process's memory stays put; a header declaring (2**40, 3, 32, 32) is a 413 naming the
sizes; a JSON body nested 200,000 deep a 400; a small valid body is still served (by a real ONNX
model, run in-process). Example inputs are the uploading owner's only."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import hashlib
import io
import threading
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
from fastapi.testclient import TestClient
from numpy.lib import format as npy_format

from adapters.local_store import LocalFolderStore
from adapters.uploads import LocalUploader
from ayci.bootstrap import request_limits
from ayci.settings import Settings
from schemas import keys
from schemas.combos import Combo
from schemas.documents import Latency, SummaryResult
from schemas.signature import ModelSignature, TensorSpec
from services.request.app import RequestDeps, create_app, parse_api_keys
from serving import app as serving_app
from serving import wire
from serving.app import ServerThread
from serving.endpoint import Endpoint
from serving.models import ServedModel
from serving.scaling import ScalingPolicy
from tests.fakes import RecordingPublisher, tiny_onnx_model
from workloads.array_files import ArraysTooLarge, UnreadableArrays, read_arrays, read_headers

BOMB_SHAPE = (81380, 3, 32, 32)
HUGE_SHAPE = (2**40, 3, 32, 32)
ALICE = {"X-API-Key": "alice-key-123"}
BOB = {"X-API-Key": "bob-key-4567"}


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return gzip.decompress((Path(__file__).parent / "fixtures" / "zeros_bomb.npz.gz").read_bytes())


def npy_header(shape, descr="<f4") -> bytes:
    """A `.npy` header declaring `shape` (and no data)."""
    buffer = io.BytesIO()
    npy_format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def zipped(members: dict[str, bytes], compression=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


class PeakRss:
    """The process's resident memory sampled every 2 ms while the block runs: `growth_mb` is the
    peak over what it was when the block began."""

    def __enter__(self) -> PeakRss:
        self._process = psutil.Process()
        self._start = self._peak = self._process.memory_info().rss
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(0.002):
            self._peak = max(self._peak, self._process.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        self._peak = max(self._peak, self._process.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return (self._peak - self._start) / 2**20


# --- the reader


def test_the_fixture_is_the_measured_bomb(bomb):
    assert 0.9e6 < len(bomb) < 1.0e6
    (header,) = read_headers(bomb, max_bytes=1 << 40).values()  # headers only: nothing inflated past them
    assert header.shape == BOMB_SHAPE and header.nbytes == 81380 * 3 * 32 * 32 * 4


def test_declared_sizes_are_summed_before_anything_is_allocated(bomb):
    started = time.perf_counter()
    with PeakRss() as rss, pytest.raises(ArraysTooLarge, match="953.7 MB of arrays; at most 64.0 MB"):
        read_arrays(bomb, max_bytes=64 << 20)
    assert time.perf_counter() - started < 1.0 and rss.growth_mb < 50
    for body in (npy_header(HUGE_SHAPE), zipped({"pixels.npy": npy_header(HUGE_SHAPE)})):
        with pytest.raises(ArraysTooLarge, match=r"declare.* 1.35e\+16 bytes of arrays"):
            read_arrays(body, max_bytes=64 << 20)
    many = zipped({f"a{i}.npy": npy(np.zeros(2, np.float32)) for i in range(5)})
    with pytest.raises(ArraysTooLarge, match="holds 5 arrays; at most 4"):
        read_arrays(many, max_bytes=1 << 20, max_arrays=4)
    # the sum, not each member: two arrays of 40 MB declared against 64 MB
    two = zipped({"a.npy": npy_header((10 << 20,)), "b.npy": npy_header((10 << 20,))})
    with pytest.raises(ArraysTooLarge, match="headers declare 80.0 MB"):
        read_arrays(two, max_bytes=64 << 20)


def test_a_member_whose_zip_size_lies_is_read_no_further_than_its_header(tmp_path):
    """The zip's directory says 200 bytes for a member whose header declares 4,000: zipfile stops
    at 200 bytes, so the data ends early (or its CRC fails): refused, never read past either size."""
    honest = zipped({"x.npy": npy(np.ones(1000, np.float32))}, zipfile.ZIP_STORED)
    directory = honest.rindex(b"PK\x01\x02")  # the central directory entry: sizes at +20 and +24
    lying = bytearray(honest)
    lying[directory + 24 : directory + 28] = (200).to_bytes(4, "little")
    with pytest.raises(UnreadableArrays, match="ends after|Bad CRC-32"):
        read_arrays(bytes(lying), max_bytes=1 << 20)
    path = tmp_path / "lying.npz"
    path.write_bytes(bytes(lying))
    with pytest.raises(UnreadableArrays, match="ends after|Bad CRC-32"):
        read_headers(path, max_bytes=1 << 20, verify_data=True)


def test_pickles_other_compressions_and_truncations_are_refused_and_plain_arrays_read():
    with pytest.raises(UnreadableArrays, match="object arrays"):
        read_arrays(npz(o=np.array([None, {"x": 1}], dtype=object)), max_bytes=1 << 20)
    with pytest.raises(UnreadableArrays, match="object arrays"):
        read_arrays(npy_header((2,), descr="|O"), max_bytes=1 << 20)
    with pytest.raises(UnreadableArrays, match="only stored or deflated"):  # bzip2 inflates without bound
        read_arrays(zipped({"x.npy": npy(np.ones(4))}, zipfile.ZIP_BZIP2), max_bytes=1 << 20)
    with pytest.raises(UnreadableArrays, match="ends after 91 of 96"):
        read_arrays(npy(np.ones(24, np.float32))[:-5], max_bytes=1 << 20)
    with pytest.raises(UnreadableArrays, match="'notes.txt' is not a .npy array"):
        read_arrays(zipped({"notes.txt": b"hello"}), max_bytes=1 << 20)
    with pytest.raises(UnreadableArrays, match="not a .npy or .npz"):
        read_arrays(b"GIF89a", max_bytes=1 << 20)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    read = read_arrays(npz(c=x, f=np.asfortranarray(x), i=np.arange(3)), max_bytes=1 << 20)
    assert all((read[name] == want).all() for name, want in (("c", x), ("f", x), ("i", np.arange(3))))
    assert (read_arrays(npy(x), max_bytes=x.nbytes)[""] == x).all()
    with pytest.raises(ArraysTooLarge):
        read_arrays(npy(x), max_bytes=x.nbytes - 1)


def test_worker_frames_are_bounded_by_their_size():
    arrays = {"y": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([1, 2])}
    back = wire.unpack(wire.pack(arrays))
    assert list(back) == ["y", "n"] and all((back[k] == arrays[k]).all() for k in arrays)
    with pytest.raises(ArraysTooLarge):  # a hostile worker's compressed answer declares more than it sent
        wire.unpack(npz(y=np.zeros((1000, 1000), np.float32)))


# --- the endpoint


class OnnxWorker:
    """An in-process worker running a real one-node ONNX model (Relu over x [1, 3, 8, 8])."""

    def __init__(self) -> None:
        import onnxruntime as ort

        self.pid, self.load_ms = None, 0.0
        self.session = ort.InferenceSession(tiny_onnx_model(), providers=["CPUExecutionProvider"])

    def infer(self, payload: bytes) -> bytes:
        (y,) = self.session.run(None, wire.unpack(payload))
        return wire.pack({"y": y})

    def stop(self) -> None:
        pass


@contextlib.contextmanager
def endpoint_at(tmp_path, **app_options):
    model = ServedModel(
        name="tiny",
        run_id="r",
        label="intel/onnx/b1/1024MB",
        chosen_by="chosen",
        result=SummaryResult(
            combo=Combo(hardware="intel", optimizer="onnx", batch_size=1, memory_mb=1024),
            latency_ms=Latency(p50=1.0, p90=1.0, p99=1.0),
        ),
        signature=ModelSignature(
            format="onnx",
            inputs=[TensorSpec(name="x", dtype="float32", dims=[1, 3, 8, 8])],
            outputs=[TensorSpec(name="y", dtype="float32", dims=[1, 3, 8, 8])],
        ),
        artifact_path=tmp_path / "model.onnx",
        reference_path=tmp_path / "reference.npz",
    )
    endpoint = Endpoint(
        [model],
        budget_mb=2048,
        policy=ScalingPolicy(max_workers=1, idle_s=60),
        work_dir=tmp_path,
        start_worker=lambda _: OnnxWorker(),
    ).start()
    try:
        with ServerThread(serving_app.create_app(endpoint, **app_options)) as url:
            yield f"{url}/invocations/tiny"
    finally:
        endpoint.close()


def test_endpoint_bombs_are_refused_with_the_reason_and_small_bodies_served(bomb, tmp_path):
    with endpoint_at(tmp_path, max_body_bytes=16 << 20) as url:
        started = time.perf_counter()
        with PeakRss() as rss:
            refused = httpx.post(url, content=bomb, timeout=60)
        assert refused.status_code == 413 and "953.7 MB of arrays; at most 64.0 MB" in refused.json()["detail"]
        elapsed = time.perf_counter() - started
        assert elapsed < 5.0 and rss.growth_mb < 100, (elapsed, rss.growth_mb, refused.text)
        for body in (npy_header(HUGE_SHAPE), zipped({"x.npy": npy_header(HUGE_SHAPE)})):
            huge = httpx.post(url, content=body, timeout=60)
            assert huge.status_code == 413 and "1.35e+16 bytes" in huge.json()["detail"], huge.text
        deep = b'{"inputs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
        nested = httpx.post(url, content=deep, headers={"content-type": "application/json"}, timeout=60)
        assert nested.status_code == 400 and "nested too deep" in nested.json()["detail"]
        eighteen_axes = b'{"inputs": {"x": ' + b"[" * 18 + b"1.0" + b"]" * 18 + b"}}"  # parses; no tensor has them
        too_many_axes = httpx.post(url, content=eighteen_axes, headers={"content-type": "application/json"}, timeout=60)
        assert (
            too_many_axes.status_code == 400 and too_many_axes.json()["detail"] == "input x: nested deeper than 16 axes"
        )
        many = b'{"inputs": [' + b"0," * (3 << 20) + b"0]}"  # 6 MB of JSON, 3 million values
        counted = httpx.post(url, content=many, headers={"content-type": "application/json"}, timeout=60)
        assert counted.status_code == 413 and "send .npy/.npz" in counted.json()["detail"]
        pickled = httpx.post(url, content=npz(x=np.array([None], dtype=object)), timeout=60)
        assert pickled.status_code == 400 and "object arrays" in pickled.json()["detail"]
        x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
        served = httpx.post(url, content=npz(x=x), timeout=60)
        assert served.status_code == 200, served.text
        assert (wire.unpack(served.content)["y"] == np.maximum(x, 0)).all()
        as_json = httpx.post(url, json={"inputs": {"x": x.tolist()}}, timeout=60)
        assert as_json.status_code == 200 and np.allclose(as_json.json()["outputs"]["y"], np.maximum(x, 0))


def test_endpoint_decodes_off_the_event_loop_and_answers_oom_with_413(tmp_path, monkeypatch):
    threads = []
    decode = serving_app.decode

    def recorded(*args):
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            threads.append("event loop")
        threads.append(threading.current_thread().name)
        if args[0].startswith(b"OOM"):
            raise MemoryError
        return decode(*args)

    monkeypatch.setattr(serving_app, "decode", recorded)
    with endpoint_at(tmp_path) as url:
        assert httpx.post(url, content=npy(np.zeros((1, 3, 8, 8), np.float32)), timeout=60).status_code == 200
        out_of_memory = httpx.post(url, content=b"OOM", headers={"content-type": "application/json"}, timeout=60)
    assert out_of_memory.status_code == 413 and "ran out of memory" in out_of_memory.json()["detail"]
    assert len(threads) == 2 and "event loop" not in threads and "endpoint-http" not in threads


# --- PUT /inputs and their owners


@pytest.fixture
def deps(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", max_body_bytes=4096, max_model_bytes=10_000_000)
    return RequestDeps(
        store=LocalFolderStore(settings.data_dir),
        publisher=RecordingPublisher(),
        api_keys=parse_api_keys("alice-key-123:alice,bob-key-4567:bob"),
        uploader=LocalUploader(tmp_path / "uploads"),
        limits=request_limits(settings),
    )


@pytest.fixture
def client(deps):
    return TestClient(create_app(deps))


def stored_npz(deps) -> list[str]:
    return [k for k in deps.store.list_keys("inputs/") if k.endswith(".npz")]


def test_put_inputs_bombs_are_413_and_nothing_is_stored(client, deps, bomb, tmp_path):
    huge = client.put("/inputs", headers=ALICE, content=zipped({"pixels.npy": npy_header((2**40, 4), "|u1")}))
    assert huge.status_code == 413 and "4,194,304.0 MB of arrays; at most 256.0 MB" in huge.json()["detail"]
    with PeakRss() as rss:
        inflated = client.put("/inputs", headers=ALICE, content=bomb)  # 1 GB: over the 256 MB of example inputs
    assert inflated.status_code == 413 and "953.7 MB" in inflated.json()["detail"] and rss.growth_mb < 100
    truncated = client.put("/inputs", headers=ALICE, content=npz(x=np.ones((4, 2), np.float32))[:-40])
    assert truncated.status_code == 422 and "not a usable .npz" in truncated.json()["detail"]
    assert stored_npz(deps) == []


def test_put_inputs_reads_the_data_once_off_the_event_loop(client, deps, monkeypatch):
    import services.request.routers.inputs as route
    import workloads.array_files as array_files

    reads, loops = [], []
    skim = array_files._skim

    def counted(stream, header, where):
        reads.append(where)
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop()
            loops.append(where)
        return skim(stream, header, where)

    monkeypatch.setattr(array_files, "_skim", counted)
    monkeypatch.setattr(array_files.np, "load", None)  # nothing decodes through numpy.load
    good = npz(pixels=np.zeros((2, 3, 8, 8), np.float32), mask=np.ones((2, 4), bool))
    stored = client.put("/inputs", headers=ALICE, content=good)
    assert stored.status_code == 201, stored.text
    assert stored.json()["arrays"] == {
        "pixels": {"shape": [2, 3, 8, 8], "dtype": "float32"},
        "mask": {"shape": [2, 4], "dtype": "bool"},
    }
    assert sorted(reads) == ["array mask", "array pixels"] and loops == []  # each array's data read once
    assert route.MAX_INPUTS_BYTES == 16 << 20 and stored_npz(deps) == [keys.inputs(hashlib.sha256(good).hexdigest())]


def test_inputs_are_the_uploading_owners_only(client, deps):
    model = tiny_onnx_model()
    sha, size = hashlib.sha256(model).hexdigest(), len(model)
    for who in (ALICE, BOB):
        offer = client.post("/models/uploads", headers=who, json={"sha256": sha, "size_bytes": size}).json()
        if offer["upload"]:
            assert client.put("/" + offer["upload"]["url"], headers=who, content=model).status_code == 204
        assert client.post(f"/models/{sha}/verify", headers=who, json={"size_bytes": size}).status_code == 201
    good = npz(x=np.zeros((2, 3, 8, 8), np.float32))
    inputs_sha = client.put("/inputs", headers=ALICE, content=good).json()["sha256"]
    body = {
        "model": {"sha256": sha, "size_bytes": size},
        "workload": "custom",
        "input_size": [1],
        "matrix": {"intel": ["onnx"]},
        "batch_sizes": [1],
        "memory_sizes_mb": [1769],
        "inputs_sha256": inputs_sha,
    }
    assert client.post("/plans", headers=ALICE, json=body).status_code == 200
    for path in ("/plans", "/runs"):  # Bob knows the hash, not the inputs: as if nothing were stored
        refused = client.post(path, headers=BOB, json=body)
        assert refused.status_code == 409 and "are not stored" in refused.json()["detail"], refused.text
    assert deps.publisher.published == []
    assert client.put("/inputs", headers=BOB, content=good).json()["sha256"] == inputs_sha  # he holds them too
    assert client.post("/runs", headers=BOB, json=body).status_code == 201
    assert deps.store.exists(keys.inputs_owner(inputs_sha, "alice")) and deps.store.exists(
        keys.inputs_owner(inputs_sha, "bob")
    )
