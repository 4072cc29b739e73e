"""`python -m ayci run --localstack` as a user runs it: a service process killed mid-run is
restarted, the run completes, the table is printed, and the user is told LocalStack is still
running and how to stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import TINY_IMAGE_SIZE

pytestmark = pytest.mark.localstack
REPO = Path(__file__).resolve().parents[2]


def service_pids(stack: str, service: str) -> list[int]:
    """The pids of `python -m services.<service>` processes of this stack."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"services.{service}".encode() in cmdline and f"AYCI_QUEUE_PREFIX={stack}".encode() in environ:
            pids.append(int(proc.name))
    return pids


def test_a_worker_that_dies_is_restarted_and_the_run_completes(tmp_path, tiny_image_model):
    stack = f"c{uuid.uuid4().hex[:6]}"
    # no AWS_* in the CLI's environment: it gives LocalStack's address to its clients itself
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env |= {"PYTHONPATH": str(REPO), "AYCI_MEASURE_TIME_CAP_S": "1", "AYCI_MEASURE_MIN_ITERATIONS": "5"}
    command = [
        sys.executable,
        "-m",
        "ayci",
        "run",
        "--localstack",
        "--stack",
        stack,
        "--data-dir",
        str(tmp_path / "data"),
        "--model",
        str(tiny_image_model),
        "--input-size",
        ",".join(map(str, TINY_IMAGE_SIZE)),
        "--matrix",
        "intel=onnx",
        "--batch",
        "1",
        "--memory",
        "1769",
        "--timeout",
        "400",
    ]
    cli = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not service_pids(stack, "archiver") and time.monotonic() < deadline and cli.poll() is None:
            time.sleep(0.5)
        (archiver,) = service_pids(stack, "archiver")
        os.kill(archiver, signal.SIGKILL)  # the archiver dies before the run ends
        out, err = cli.communicate(timeout=420)
    finally:
        if cli.poll() is None:
            cli.kill()
    from infra.localstack import use_localstack
    from infra.stack import delete_stack

    use_localstack()
    delete_stack(stack, empty_bucket=True)
    assert cli.returncode == 0, err[-3000:]
    assert "archiver died: restarted it" in err and "restarted after dying: archiver x1" in err
    assert "intel/onnx/b1/1769MB" in out or "onnx" in out  # the table
    assert "LocalStack is still running" in err and "scripts/localstack.sh stop" in err
