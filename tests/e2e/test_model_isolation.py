"""The user's model never runs in a long-lived process: its signature, the base model's
reference outputs, every conversion step and the measurement run in the sandbox
(`measuring/sandbox.py`) with a time limit and a memory cap. A model that hangs at its
reference, or whose conversion would fold constants for hours, fails its own combinations with
the reason; the server keeps answering within a second and other runs complete."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from schemas.combos import ModelRef
from services.converter.reference import ReferenceFailed, compute_reference
from tests.conftest import TINY_IMAGE_SIZE, wait_until_serving
from tests.e2e.test_web_page import free_port
from tests.hostile_models import folding_onnx, hanging_onnx

REPO = Path(__file__).resolve().parents[2]
API_KEY = "isolation-key-0001"


def hanging_onnx_model() -> bytes:
    return hanging_onnx()


def model_ref(data: bytes, fmt: str, input_size=TINY_IMAGE_SIZE) -> ModelRef:
    return ModelRef(
        sha256=hashlib.sha256(data).hexdigest(),
        size_bytes=len(data),
        format=fmt,
        workload="image_classification",
        input_size=input_size,
    )


def test_a_hanging_model_fails_within_its_time_limit(tmp_path):
    data = hanging_onnx_model()
    (tmp_path / "m.onnx").write_bytes(data)
    started = time.monotonic()
    with pytest.raises(ReferenceFailed, match="did not finish on the workload's inputs within 3 s"):
        compute_reference(
            tmp_path / "m.onnx",
            model_ref(data, "onnx").model_dump_json(),
            "image_classification",
            TINY_IMAGE_SIZE,
            1,
            tmp_path / "r.npz",
            timeout_s=3,
            memory_mb=4096,
        )
    assert time.monotonic() - started < 30


def test_an_input_too_large_to_allocate_fails_as_out_of_memory(tmp_path, tiny_image_model):
    data = tiny_image_model.read_bytes()
    huge = [8192, 8192]  # 6.4 GB of float32 pixels at batch 8
    with pytest.raises(ReferenceFailed, match="out of memory computing the reference within 2048 MB"):
        compute_reference(
            tiny_image_model,
            model_ref(data, "pt2", huge).model_dump_json(),
            "image_classification",
            huge,
            8,
            tmp_path / "r.npz",
            timeout_s=120,
            memory_mb=2048,
        )


# The server's reference and conversion limits in the test below: the hanging reference and the folding
# conversion each wait it out, one after the other (30 s each took a minute of CI); the normal model's
# reference and conversion (ONNX: no torch in the sandbox) take a few seconds, and completed within 15 s with
# the 2 cores at a load average of 5.
LIMIT_S = 15


def test_the_server_answers_and_other_runs_complete_while_hostile_models_fail(tmp_path, tiny_image_model):
    """Three runs at once on `ayci serve`: a model whose reference hangs (an endless `Loop`), one
    whose conversion would fold constants for minutes (n^3), and a normal one (the tiny ResNet as
    ONNX). The hostile two fail with a time (or memory) reason, the normal one is measured, and
    `GET /runs/{id}` answers within 1 s throughout."""
    from engines.onnx_engine import export_to_onnx

    normal = tmp_path / "resnet18-32.onnx"
    export_to_onnx(tiny_image_model, normal)
    port = free_port()
    env = {
        **os.environ,
        "AYCI_API_KEYS": f"{API_KEY}:isolated",
        "AYCI_MEASURE_TIME_CAP_S": "1",
        "AYCI_MEASURE_MIN_ITERATIONS": "5",
        # The bus is one thread: the hanging reference, then the folding conversion, each waits out its whole
        # limit before the next step. The normal model is ONNX (the tiny ResNet exported), whose reference and
        # conversion need no torch in the sandbox: a few seconds, where the limits leave LIMIT_S.
        "AYCI_REFERENCE_TIMEOUT_S": str(LIMIT_S),
        "AYCI_CONVERSION_TIMEOUT_S": str(LIMIT_S),  # the folding takes minutes
        "PYTHONPATH": str(REPO),
    }
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115  (closed in the finally)
    process = subprocess.Popen(
        [sys.executable, "-m", "ayci", "serve", "--port", str(port), "--data-dir", str(tmp_path / "data")],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    headers = {"X-API-Key": API_KEY}
    try:
        wait_until_serving(
            f"{url}/openapi.json",
            lambda: (tmp_path / "serve.log").read_text()[-3000:],
            alive=lambda: process.poll() is None,
        )
        runs = {}
        models = (
            ("hanging", hanging_onnx_model()),
            ("folding", folding_onnx(8192)),
            ("normal", normal.read_bytes()),
        )
        for name, data in models:
            sha = hashlib.sha256(data).hexdigest()
            offer = httpx.post(
                f"{url}/models/uploads", json={"sha256": sha, "size_bytes": len(data)}, headers=headers, timeout=30
            ).json()
            upload = offer["upload"]
            assert (
                httpx.request(
                    upload["method"],
                    upload["url"] if upload["url"].startswith("http") else f"{url}/{upload['url'].lstrip('/')}",
                    content=data,
                    headers={**headers, **upload.get("headers", {})},
                    timeout=60,
                ).status_code
                < 300
            )
            verified = httpx.post(
                f"{url}/models/{sha}/verify", json={"size_bytes": len(data)}, headers=headers, timeout=60
            )
            assert verified.status_code == 201, verified.text
            body = {
                "model": {"sha256": sha, "size_bytes": len(data)},
                "workload": "image_classification",
                "input_size": TINY_IMAGE_SIZE,
                "matrix": {"intel": ["onnx"]},
                "batch_sizes": [1],
                "memory_sizes_mb": [1769],
            }
            created = httpx.post(f"{url}/runs", json=body, headers=headers, timeout=30)
            assert created.status_code == 201, created.text
            runs[name] = created.json()["run_id"]
        slowest_answer, answers, ended = 0.0, 0, {}
        deadline = time.monotonic() + 600
        while len(ended) < len(runs) and time.monotonic() < deadline:
            for name, run_id in runs.items():
                asked = time.monotonic()
                progress = httpx.get(f"{url}/runs/{run_id}", headers=headers, timeout=30).json()
                slowest_answer = max(slowest_answer, time.monotonic() - asked)
                answers += 1
                if progress["status"] != "running":
                    ended[name] = progress
            time.sleep(0.3)
        assert set(ended) == set(runs), (tmp_path / "serve.log").read_text()[-3000:]
        assert ended["normal"]["status"] == "complete", [c.get("reason") for c in ended["normal"]["combinations"]]
        assert ended["hanging"]["status"] == "failed"
        hanging_reason = ended["hanging"]["combinations"][0]["reason"]
        assert f"did not finish on the workload's inputs within {LIMIT_S} s" in hanging_reason, hanging_reason
        assert ended["folding"]["status"] == "failed"
        folding_reason = ended["folding"]["combinations"][0]["reason"]
        assert f"timed out after {LIMIT_S} s" in folding_reason or "out of memory" in folding_reason, folding_reason
        assert slowest_answer < 1, f"the API took {slowest_answer:.2f} s to answer ({answers} answers)"
        assert process.poll() is None
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
