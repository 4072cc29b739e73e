"""`ayci endpoint`: runs' picks served behind one HTTP endpoint, with real worker processes
(ONNX Runtime, confined like measurements where cgroups allow) on two tiny models measured by
real runs: one load under concurrent first requests, LRU eviction under a small budget, a worker
killed mid-request, bad requests refused while the endpoint stays up; the Lambda-like pool (a worker
per request finding none idle, all reclaimed when idle) and the open-loop load test against the
traffic simulation fed this machine's calibration."""

import contextlib
import io
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

from adapters.local_store import LocalFolderStore
from ayci.bootstrap import embedded
from ayci.cli import main as cli_main
from ayci.settings import Settings
from measuring.confinement import find_hierarchy, unavailable_reason
from schemas import keys
from schemas.combos import Matrix
from schemas.events import RequestSubmitted
from services.request.submission import new_run, store_model
from serving.app import ServerThread, create_app
from serving.endpoint import Endpoint
from serving.models import served_models
from serving.scaling import ScalingPolicy
from tests.conftest import archived_summary
from workloads.examples import export_example

SIZES = ([32, 32], [40, 40])  # two models: two runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The data folder and the run ids of two finished runs (intel/onnx/b1/1024MB each)."""
    root = tmp_path_factory.mktemp("endpoint")
    app = embedded(Settings(data_dir=root / "data", measure_time_cap_s=1.0, measure_min_iterations=5))
    run_ids = []
    for size in SIZES:
        model = store_model(
            app.store,
            export_example("image_classification", size, root / f"m{size[0]}.pt2"),
            "image_classification",
            size,
        )
        envelope = new_run(
            RequestSubmitted(
                model=model, matrix=Matrix(optimizers={"intel": ["onnx"]}, batch_sizes=[1], memory_sizes_mb=[1024])
            )
        )
        app.publisher.publish([envelope])
        app.bus.run_until_idle()
        assert json.loads(app.store.get_bytes(keys.summary(envelope.run_id)))["status"] == "complete"
        run_ids.append(envelope.run_id)
    return root / "data", run_ids


@contextlib.contextmanager
def endpoint_at(
    runs, tmp_path, *, budget_mb=8000, max_workers=1, max_body_bytes=1 << 20, max_queue=32, lambda_like=False, idle_s=60
):
    """The endpoint over HTTP on a free loopback port: (base URL, Endpoint)."""
    data, run_ids = runs
    models = served_models(LocalFolderStore(data), run_ids, tmp_path)
    endpoint = Endpoint(
        models,
        budget_mb=budget_mb,
        policy=ScalingPolicy(max_workers=max_workers, idle_s=idle_s, lambda_like=lambda_like),
        max_queue=max_queue,
        work_dir=tmp_path,
    ).start()
    try:
        with ServerThread(create_app(endpoint, max_body_bytes=max_body_bytes)) as url:
            yield url, endpoint
    finally:
        endpoint.close()


def image(size, batch=1, seed=0):
    return np.random.default_rng(seed).random((batch, 3, *size), dtype=np.float32)


def npy(array):
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def model_state(base, name):
    return next(m for m in httpx.get(f"{base}/models").json()["models"] if m["model"] == name)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def memory_cap_mb(pid: int) -> float | None:
    """The memory cap of the cgroup process `pid` is in (None: not capped)."""
    hierarchy = find_hierarchy(Path(f"/proc/{pid}"))
    if hierarchy.version == 1:
        limit = (hierarchy.memory_parent / "memory.limit_in_bytes").read_text().split()[0]
    else:  # v2: the group itself, not its parent
        own = next(
            line.split("::", 1)[1]
            for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        limit = (Path("/sys/fs/cgroup") / own.lstrip("/") / "memory.max").read_text().split()[0]
    return None if limit == "max" or int(limit) > 1 << 50 else int(limit) / 2**20


def cpu_shares(pid: int) -> int:
    """The CPU weight of the cgroup process `pid` is in, as v1 cpu.shares (v2's cpu.weight converted)."""
    hierarchy = find_hierarchy(Path(f"/proc/{pid}"))
    if hierarchy.version == 1:
        return int((hierarchy.cpu_parent / "cpu.shares").read_text())
    own = next(
        line.split("::", 1)[1]
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        if line.startswith("0::")
    )
    return round(int((Path("/sys/fs/cgroup") / own.lstrip("/") / "cpu.weight").read_text()) * 1024 / 100)


def test_concurrent_first_requests_load_the_model_once(runs, tmp_path):
    with endpoint_at(runs, tmp_path) as (base, endpoint):
        name = next(m.name for m in endpoint.models.values() if m.signature.inputs[0].dims[-1] == 32)
        body = npy(image(SIZES[0]))
        sent = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            answers = list(
                pool.map(lambda _: httpx.post(f"{base}/invocations/{name}", content=body, timeout=120), range(6))
            )
        answered = time.monotonic()
        assert [a.status_code for a in answers] == [200] * 6
        # when each entered the model's pool, on this host's monotonic clock (a load test places it on its schedule)
        assert all(sent <= float(a.headers["x-pool-entered-at"]) <= answered for a in answers)
        outputs = [np.load(io.BytesIO(a.content))["linear"] for a in answers]
        assert outputs[0].shape == (1, 1000) and all(np.array_equal(o, outputs[0]) for o in outputs)
        assert all(a.headers["x-cold-load"] == "1" for a in answers)  # all of them waited for the one load
        state = model_state(base, name)
        assert state["loads"] == {"first": 1} and state["workers"] == 1
        assert len({a.headers["x-worker-pid"] for a in answers}) == 1
        listing = httpx.get(f"{base}/models").json()
        assert listing["confined"] == (unavailable_reason() is None) and (
            listing["confined"] or listing["confinement_reason"]
        )
        if listing["confined"]:  # the worker runs capped at its combination's memory size, as its measurement did
            assert memory_cap_mb(state["worker_pids"][0]) == 1024
        again = httpx.post(
            f"{base}/invocations/{name}", json={"inputs": {"pixels": image(SIZES[0]).tolist()}}, timeout=60
        )
        assert again.status_code == 200 and again.headers["x-cold-load"] == "0"
        assert np.allclose(again.json()["outputs"]["linear"], outputs[0], atol=1e-5)
        metrics = httpx.get(f"{base}/metrics").text
        assert f'ayci_model_loads_total{{kind="first",model="{name}"}} 1.0' in metrics
        assert f'ayci_requests_total{{model="{name}",status="200"}} 7.0' in metrics
        assert "ayci_request_latency_seconds_bucket" in metrics and f'ayci_queue_depth{{model="{name}"}} 0.0' in metrics


def test_a_small_budget_evicts_the_least_recently_used_model(runs, tmp_path):
    with endpoint_at(runs, tmp_path, budget_mb=1500) as (base, endpoint):  # room for one 1024 MB worker
        by_size = {m.signature.inputs[0].dims[-1]: m.name for m in endpoint.models.values()}
        small, large = by_size[32], by_size[40]
        assert httpx.post(f"{base}/invocations/{small}", content=npy(image(SIZES[0])), timeout=120).status_code == 200
        (pid,) = model_state(base, small)["worker_pids"]
        assert httpx.post(f"{base}/invocations/{large}", content=npy(image(SIZES[1])), timeout=120).status_code == 200
        evicted, loaded = model_state(base, small), model_state(base, large)
        assert evicted["evictions"] == 1 and not evicted["loaded"] and loaded["loaded"]
        assert not alive(pid)  # its worker process is gone
        assert httpx.get(f"{base}/models").json()["reserved_mb"] == 1024
        assert httpx.post(f"{base}/invocations/{small}", content=npy(image(SIZES[0])), timeout=120).status_code == 200
        assert model_state(base, small)["loads"] == {"first": 2} and model_state(base, large)["evictions"] == 1
        assert f'ayci_model_evictions_total{{model="{small}"}} 1.0' in httpx.get(f"{base}/metrics").text


def test_a_worker_killed_mid_request_is_replaced_and_the_request_answered_or_refused_cleanly(runs, tmp_path):
    with endpoint_at(runs, tmp_path, max_body_bytes=64 << 20) as (base, endpoint):
        name = next(m.name for m in endpoint.models.values() if m.signature.inputs[0].dims[-1] == 40)
        assert httpx.post(f"{base}/invocations/{name}", content=npy(image(SIZES[1])), timeout=120).status_code == 200
        (pid,) = model_state(base, name)["worker_pids"]
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                httpx.post, f"{base}/invocations/{name}", content=npy(image(SIZES[1], batch=256)), timeout=120
            )
            while model_state(base, name)["busy"] == 0 and not pending.done():
                time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            answer = pending.result()
        assert answer.status_code in (200, 503), answer.text  # retried on the replacement, or refused with a reason
        if answer.status_code == 503:
            assert answer.headers["retry-after"] and "died" in answer.json()["detail"]
        after = httpx.post(f"{base}/invocations/{name}", content=npy(image(SIZES[1])), timeout=120)
        assert after.status_code == 200 and after.headers["x-worker-pid"] != str(pid)
        state = model_state(base, name)
        assert state["lost_workers"] == 1 and state["loads"] == {"first": 1, "replacement": 1} and state["workers"] == 1


def test_bad_requests_are_refused_with_the_reason_and_the_endpoint_stays_up(runs, tmp_path):
    with endpoint_at(runs, tmp_path, max_body_bytes=64 << 10) as (base, endpoint):
        name = next(m.name for m in endpoint.models.values() if m.signature.inputs[0].dims[-1] == 32)
        url = f"{base}/invocations/{name}"
        unknown = httpx.post(f"{base}/invocations/no-such-model", json={"inputs": [1]})
        assert unknown.status_code == 404 and name in unknown.json()["detail"]
        wrong_shape = httpx.post(url, json={"inputs": {"pixels": image([16, 16]).tolist()}})
        assert (
            wrong_shape.status_code == 422
            and "pixels" in wrong_shape.json()["detail"]
            and "axis 2" in wrong_shape.json()["detail"]
        )
        wrong_dtype = httpx.post(url, content=npy(image(SIZES[0]).astype(np.float64)))
        assert (
            wrong_dtype.status_code == 422
            and wrong_dtype.json()["detail"] == "input pixels: dtype float64, the model takes float32"
        )
        extra = httpx.post(url, json={"inputs": {"pixels": image(SIZES[0]).tolist(), "mask": [[1]]}})
        assert extra.status_code == 422 and "mask" in extra.json()["detail"]
        too_big = httpx.post(url, content=npy(image(SIZES[0], batch=8)))  # 96 KB over a 64 KB limit
        assert too_big.status_code == 413 and "limit" in too_big.json()["detail"]
        assert httpx.post(url, content=b"not a tensor", headers={"content-type": "application/json"}).status_code == 400
        assert httpx.post(url, json={"inputs": [[1, 2], [3]]}).status_code == 422
        assert not model_state(base, name)["loaded"]  # refused before any load
        assert httpx.post(url, content=npy(image(SIZES[0])), timeout=120).status_code == 200
        metrics = httpx.get(f"{base}/metrics").text
        assert 'ayci_requests_total{model="(unknown)",status="404"} 1.0' in metrics
        assert f'ayci_requests_total{{model="{name}",status="422"}} 4.0' in metrics


def test_overload_is_refused_with_retry_after_never_queued_without_bound(runs, tmp_path):
    with endpoint_at(runs, tmp_path, max_queue=2, max_body_bytes=64 << 20) as (base, endpoint):
        name = next(m.name for m in endpoint.models.values() if m.signature.inputs[0].dims[-1] == 40)
        body = npy(image(SIZES[1], batch=32))
        with ThreadPoolExecutor(12) as pool:
            answers = list(
                pool.map(lambda _: httpx.post(f"{base}/invocations/{name}", content=body, timeout=120), range(12))
            )
        refused = [a for a in answers if a.status_code == 503]
        assert refused and all(a.status_code == 200 for a in answers if a not in refused)
        assert all(int(a.headers["retry-after"]) >= 1 and "queued already" in a.json()["detail"] for a in refused)
        assert model_state(base, name)["queue_depth"] == 0
        assert httpx.post(f"{base}/invocations/{name}", content=npy(image(SIZES[1])), timeout=120).status_code == 200


def test_a_run_that_cannot_be_served_is_refused_at_start_with_the_reason(runs, tmp_path, capsys):
    def said() -> str:
        return " ".join(capsys.readouterr().err.split())  # as one line, whatever the console's width

    data, run_ids = runs
    store = LocalFolderStore(data)
    failed = "00000000-0000-0000-0000-0000000000f1"
    store.put_bytes(
        keys.summary(failed),
        json.dumps(
            archived_summary(
                failed,
                "failed",
                [],
                [{"label": "intel/onnx/b1/128MB", "stage": "inference", "reason": "out of memory at 128 MB"}],
            )
        ).encode(),
    )
    assert cli_main(["endpoint", f"{run_ids[0]},{failed}", "--data-dir", str(data)]) == 2
    assert f"run {failed} has no measured combination to serve (intel/onnx/b1/128MB: out of memory at 128 MB)" in said()
    assert cli_main(["endpoint", f"{run_ids[0]}:intel/tvm/b1/1024MB", "--data-dir", str(data)]) == 2
    assert "has no measured combination intel/tvm/b1/1024MB (it has intel/onnx/b1/1024MB)" in said()
    assert cli_main(["endpoint", run_ids[0], "--memory-budget", "512", "--data-dir", str(data)]) == 2
    assert "needs 1024 MB" in said()


def test_lambda_like_pool_starts_a_worker_per_concurrent_request_and_reclaims_them_all(runs, tmp_path):
    with endpoint_at(runs, tmp_path, max_workers=3, lambda_like=True, idle_s=2.0, max_body_bytes=64 << 20) as (
        base,
        endpoint,
    ):
        name = next(m.name for m in endpoint.models.values() if m.signature.inputs[0].dims[-1] == 40)
        body = npy(image(SIZES[1], batch=16))
        with ThreadPoolExecutor(4) as pool:
            answers = list(
                pool.map(lambda _: httpx.post(f"{base}/invocations/{name}", content=body, timeout=120), range(4))
            )
        assert [a.status_code for a in answers] == [200] * 4
        state = model_state(base, name)
        # three workers at most (the limit), each started for a request of its own: those three were cold
        assert state["loads"] == {"cold": 3} and state["workers"] == 3
        assert sum(a.headers["x-cold-load"] == "1" for a in answers) == 3
        assert len({a.headers["x-worker-pid"] for a in answers}) == 3
        pids = state["worker_pids"]
        if httpx.get(f"{base}/models").json()["confined"]:  # started at the lowest weight, ordinary once ready
            assert [cpu_shares(pid) for pid in pids] == [1024] * 3
        deadline = time.monotonic() + 10
        while model_state(base, name)["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert model_state(base, name)["workers"] == 0  # all reclaimed, none kept warm
        assert not any(alive(pid) for pid in pids)
        again = httpx.post(f"{base}/invocations/{name}", content=npy(image(SIZES[1])), timeout=120)
        assert again.status_code == 200 and again.headers["x-cold-load"] == "1"
        echo = httpx.post(f"{base}/echo/{name}", content=npy(image(SIZES[1])), timeout=30)
        assert echo.status_code == 200 and model_state(base, name)["loads"] == {"cold": 4}  # the echo starts none
        assert np.array_equal(next(iter(np.load(io.BytesIO(echo.content)).values())), image(SIZES[1]))


def test_loadtest_lambda_like_is_judged_against_the_simulation_fed_what_it_measured(runs, tmp_path, capsys):
    """Open-loop Poisson arrivals (a few hundred requests) against the Lambda-like pool; the
    simulation of the same arrivals is fed what the load measured (service time, per-request
    overhead, cold starts; the calibration's where too few) and each figure is judged within its
    bound (p50 and p99 ±15 %, cold-start share ±25 %, ±0.5 points under 2 %), the exit code
    following the verdict. Whether the two agree is measured by bench/bench_traffic_truth.py (2,000
    requests a row, steady and spiky, in each regime; docs/benchmarks.md): on this shared 2-core host
    other work moves a few hundred requests' tail, so this test checks the judgement, not its outcome."""
    data, run_ids = runs
    out = tmp_path / "loadtest"
    code = cli_main(
        [
            "loadtest",
            run_ids[0],
            "--lambda-like",
            "--rps",
            "20",  # 400 requests in 20 s (a rate this host carries: bench_traffic_truth), not 5 a second for 80 s
            "--duration",
            "20s",
            "--pattern",
            "steady",
            "--idle-time",
            "2",
            "--max-workers",
            "4",
            "--max-queue",
            "1000",
            "--out",
            str(out),
            "--data-dir",
            str(data),
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    ((name, row),) = report["models"].items()
    seen, predicted, comparison = row["observed"], row["predicted"], row["comparison"]
    assert row["lambda_like"] and seen["errors"] == {} and seen["requests"] >= 300
    assert set(seen["loads"]) == {"cold"} and seen["cold_starts"] >= 1 and seen["peak_workers"] <= 4
    assert predicted["simulated_requests"] == seen["requests"]  # the same arrivals
    assert predicted["fed"]["cold_start_ms"] > 100 and predicted["fed"]["overhead_p50_ms"] > 0
    # fed what the load measured (its own overhead and service, drawn nearest in time; its cold starts from two)
    sources = predicted["fed"]["sources"]
    assert sources["overhead"] == sources["service"] == "load, nearest in time", sources
    assert predicted["fed"]["sources"]["cold_start"] == ("load" if seen["cold_starts"] >= 2 else "calibration")
    # the simulation's arrivals are the times the requests entered the pool, each after its own front end time
    assert sources["arrivals"] == "pool entries" and 0 < seen["front"]["p50_ms"] <= seen["p50_ms"]
    assert row["regime"]["regime"] in ("warm tail", "edge", "cold starts")
    assert report["machine"]["lock_wait_s"] >= 0  # the calibration and the load held the measurement lock
    figures = {f["figure"]: (f["observed"], f["predicted"], f["passed"]) for f in comparison["figures"]}
    context = (figures, report["calibration"], report["machine"], report["generator"], seen["echo"])
    assert set(figures) == {"p50", "p99", "cold-start share"}, context
    for observed, simulated, passed in figures.values():
        assert observed is not None and simulated is not None and isinstance(passed, bool), context
    assert comparison["verdict"] == ("pass" if all(p for _, _, p in figures.values()) else "fail"), context
    assert code == (0 if comparison["verdict"] == "pass" else 1), context
    assert (out / "loadtest.png").read_bytes().startswith(b"\x89PNG") and (out / "requests.csv").exists()
    # the printed view (without --json) of the same report
    from rich.console import Console

    from report.studies import loadtest_view

    console = Console(record=True, width=150)
    for part in loadtest_view(report, json.loads((out / "samples.json").read_text()), "files"):
        console.print(part)
    printed = console.export_text()
    flat = " ".join(printed.split())  # the console wraps a long line where its figures make it long
    assert f"simulation against the load test: {comparison['verdict'].upper()}" in flat, printed
    assert "arrivals as the pool saw them" in flat and "load test (open loop)" in flat, printed
