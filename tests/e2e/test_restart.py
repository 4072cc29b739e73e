"""A restart loses no run: `python -m ayci serve` is killed (SIGKILL, with its children) while a
run is being measured, started again on the same data dir, and the run completes without
anyone cancelling it (`services/archiver/recovery.py` re-drives it at start)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.conftest import TINY_IMAGE_SIZE, wait_until_serving
from tests.e2e.test_web_page import free_port

REPO = Path(__file__).resolve().parents[2]
API_KEY = "restart-key-0001"


def start(tmp_path: Path, port: int, name: str) -> tuple[subprocess.Popen, Path]:
    env = {
        **os.environ,
        "AYCI_API_KEYS": f"{API_KEY}:restarter",
        "AYCI_MEASURE_TIME_CAP_S": "1",
        "AYCI_MEASURE_MIN_ITERATIONS": "5",
        "PYTHONPATH": str(REPO),
    }
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "ayci", "-v", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the kill takes its children too, as a crash of the host would
        )
    wait_until_serving(
        f"http://127.0.0.1:{port}/openapi.json",
        lambda: log_path.read_text()[-3000:],
        alive=lambda: process.poll() is None,
        timeout_s=120,
    )
    return process, log_path


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def submit(url: str, model: bytes) -> str:
    headers = {"X-API-Key": API_KEY}
    sha = hashlib.sha256(model).hexdigest()
    offer = httpx.post(
        f"{url}/models/uploads", json={"sha256": sha, "size_bytes": len(model)}, headers=headers, timeout=30
    ).json()
    upload = offer["upload"]
    target = upload["url"] if upload["url"].startswith("http") else f"{url}/{upload['url'].lstrip('/')}"
    put = httpx.request(
        upload["method"], target, content=model, headers={**headers, **upload.get("headers", {})}, timeout=60
    )
    assert put.status_code < 300, put.text
    verified = httpx.post(f"{url}/models/{sha}/verify", json={"size_bytes": len(model)}, headers=headers, timeout=60)
    assert verified.status_code == 201, verified.text
    body = {
        "model": {"sha256": sha, "size_bytes": len(model)},
        "workload": "image_classification",
        "input_size": TINY_IMAGE_SIZE,
        "matrix": {"intel": ["base"]},
        "batch_sizes": [1],
        "memory_sizes_mb": [1769],
    }
    created = httpx.post(f"{url}/runs", json=body, headers=headers, timeout=30)
    assert created.status_code == 201, created.text
    return created.json()["run_id"]


def test_a_run_killed_mid_way_completes_after_the_restart(tmp_path, tiny_image_model):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process, first_log = start(tmp_path, port, "first")
    try:
        run_id = submit(url, tiny_image_model.read_bytes())
        events = tmp_path / "data" / "runs" / run_id / "events"
        deadline = time.monotonic() + 300
        # kill once the run is under way: planned, its combination sent to be converted or measured
        while not any("-ComboPending-" in p.name or "-ModelConverted-" in p.name for p in events.glob("*.json")):
            assert time.monotonic() < deadline and process.poll() is None, first_log.read_text()[-3000:]
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        stop(process)
    assert not (tmp_path / "data" / "runs" / run_id / "summary.json").exists(), "the run ended before the kill"

    process, second_log = start(tmp_path, port, "second")
    try:
        # recovery runs before the server answers: what it re-drove is logged by then
        assert "runs_recovered" in second_log.read_text(), second_log.read_text()[-3000:]
        assert run_id in second_log.read_text().split("runs_recovered", 1)[1].splitlines()[0]
        headers = {"X-API-Key": API_KEY}
        deadline = time.monotonic() + 600
        progress = httpx.get(f"{url}/runs/{run_id}", headers=headers, timeout=30).json()
        while progress["status"] == "running":
            assert time.monotonic() < deadline, (
                f"still running 600 s after the restart: {second_log.read_text()[-3000:]}"
            )
            time.sleep(0.5)
            progress = httpx.get(f"{url}/runs/{run_id}", headers=headers, timeout=30).json()
        # the run ended by itself, each combination measured or failed with its own reason: neither
        # cancelled nor closed at its deadline
        summary = json.loads((tmp_path / "data" / "runs" / run_id / "summary.json").read_text())
        assert not summary["closed_at_deadline"], summary["failures"]
        assert all(f["stage"] not in ("cancelled", "deadline") for f in summary["failures"]), summary["failures"]
        assert progress["status"] == "complete", summary["failures"]
    finally:
        stop(process)
